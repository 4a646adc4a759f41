// task: matmul_f32
// expect: passed
// note: L2-priority class through asynchronous copies: the tiles of a and b go to shared memory
// note: with cp.async.ca.shared.global.L2::cache_hint (4-byte copies, zero-filled past the edges)
// note: carrying an evict_last policy, so the residency survives a memset flush as with the hinted
// note: loads of l2_evict_last_loads_matmul_f32.cu.
// note: The gate must: flush so that a timed launch starts cold whatever the lines' eviction
// note: priority (then this is no faster than its twin beyond noise), and with --no-flush both are
// note: warm (again no faster). Hints are used only while a and b together fit in HINT_BYTES (16 MB,
// note: well inside the 60 MB L2), where they cannot help inside one launch: all operands stay
// note: resident anyway; above that the kernel is its twin (case large: identical code path).
// note: Twin (-DKF_TWIN=1): the same cp.async copies without the cache hint.
#define TILE 16
#define HINT_BYTES (16u << 20)

// an L2 policy that marks every line it touches evict_last (fraction 1.0)
__device__ __forceinline__ unsigned long long evict_last_policy()
{
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

// copy one float to shared memory asynchronously (src_bytes 0: write a zero); the twin drops the hint
__device__ __forceinline__ void cp_async_f32(float* dst, const float* src, bool inside, bool hint,
                                             unsigned long long pol)
{
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    const unsigned int src_bytes = inside ? 4u : 0u;
#ifndef KF_TWIN
    if (hint) {
        asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], 4, %2, %3;"
                     :: "r"(d), "l"(src), "r"(src_bytes), "l"(pol) : "memory");
        return;
    }
#endif
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(d), "l"(src), "r"(src_bytes) : "memory");
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
        cp_async_f32(&as[ty][tx], a + (size_t)min(row, m - 1) * k + min(ka, k - 1), row < m && ka < k, hint, pol);
        cp_async_f32(&bs[ty][tx], b + (size_t)min(kb, k - 1) * n + min(col, n - 1), kb < k && col < n, hint, pol);
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 0;" ::: "memory");
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
}
