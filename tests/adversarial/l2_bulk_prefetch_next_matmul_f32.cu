// task: matmul_f32
// expect: passed
// note: L2-priority class with the bulk (TMA-free, sm_90) prefetch: after storing its tile, each
// note: thread with work left issues cp.async.bulk.prefetch.L2.global.L2::cache_hint over a 4 KB
// note: chunk of a or b with an evict_last policy, for the NEXT launch (as l2_prefetch_next_matmul_f32.cu
// note: does line by line). The direct form, cp.async.bulk.prefetch.L2.global.L2::evict_last, needs
// note: sm_100 and does not assemble for sm_90.
// note: The gate must: flush so that a timed launch starts cold whatever the lines' eviction
// note: priority (then this is no faster than its twin beyond noise), and with --no-flush both are
// note: warm (again no faster). Hints are used only while a and b together fit in HINT_BYTES (16 MB,
// note: well inside the 60 MB L2), where they cannot help inside one launch: all operands stay
// note: resident anyway; above that the kernel is its twin (case large: identical code path).
// note: Twin (-DKF_TWIN=1): the same kernel without the bulk prefetches.
#define TILE 16
#define HINT_BYTES (16u << 20)

// an L2 policy that marks every line it touches evict_last (fraction 1.0)
__device__ __forceinline__ unsigned long long evict_last_policy()
{
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

#define CHUNK 4096   // bytes a bulk prefetch covers (a multiple of 16; buffers are 256-byte aligned)

// bulk-prefetch chunk `i` of [p, p + bytes) into L2, if it exists (whole 16-byte units only)
__device__ __forceinline__ void bulk_prefetch(const float* p, size_t bytes, size_t i, unsigned long long pol)
{
    const size_t start = i * CHUNK;
    if (start >= bytes) {
        return;
    }
    const unsigned int size = (unsigned int)(min((size_t)CHUNK, bytes - start) & ~(size_t)15);
    if (size == 0) {
        return;
    }
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;"
                 :: "l"((const char*)p + start), "r"(size), "l"(pol) : "memory");
}

__device__ __forceinline__ float ld(const float* p, bool, unsigned long long)
{
    return *p;
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const bool hint = 4.0 * ((double)m * k + (double)k * n) <= (double)HINT_BYTES;
    const unsigned long long pol = evict_last_policy();
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        const int ka = t + tx, kb = t + ty;
        as[ty][tx] = (row < m && ka < k) ? ld(a + (size_t)row * k + ka, hint, pol) : 0.0f;
        bs[ty][tx] = (kb < k && col < n) ? ld(b + (size_t)kb * n + col, hint, pol) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int q = 0; q < TILE; ++q) {
            acc += as[ty][q] * bs[q][tx];
        }
        __syncthreads();
    }
    if (row < m && col < n) {
        c[(size_t)row * n + col] = acc;
    }
#ifndef KF_TWIN
    if (hint) {   // for the next launch: chunk i of a, then chunk i of b, one per thread
        const size_t thread = ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * TILE * TILE + ty * TILE + tx;
        const size_t a_bytes = 4ull * m * k, b_bytes = 4ull * k * n;
        const size_t a_chunks = (a_bytes + CHUNK - 1) / CHUNK;
        if (thread < a_chunks) {
            bulk_prefetch(a, a_bytes, thread, pol);
        } else {
            bulk_prefetch(b, b_bytes, thread - a_chunks, pol);
        }
    }
#endif
}
