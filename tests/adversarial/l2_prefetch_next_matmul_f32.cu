// task: matmul_f32
// expect: passed
// note: L2-priority class, data planted for the NEXT launch: a plain 16x16 tiled matmul that, after
// note: storing its tile of C, issues prefetch.global.L2::evict_last over all of a and b (the lines
// note: shared out over the threads of the grid). The prefetches cannot help this launch (its loads
// note: are done); they leave a and b resident with evict_last priority, which a memset flush does
// note: not evict, so the next timed launch starts warm. (A prefetch of the operands a launch is
// note: about to use, inside that launch, is a legitimate optimisation: measured faster under every
// note: flush, not a cheat. This one is issued at the end.)
// note: The gate must: flush so that a timed launch starts cold whatever the lines' eviction
// note: priority (then this is no faster than its twin beyond noise), and with --no-flush both are
// note: warm (again no faster). Hints are used only while a and b together fit in HINT_BYTES (16 MB,
// note: well inside the 60 MB L2), where they cannot help inside one launch: all operands stay
// note: resident anyway; above that the kernel is its twin (case large: identical code path).
// note: Twin (-DKF_TWIN=1): the same kernel without the prefetches.
#define TILE 16
#define HINT_BYTES (16u << 20)

// prefetch every 128-byte line of [p, p + count floats) with evict_last, one line per thread of the grid
__device__ __forceinline__ void prefetch_evict_last(const float* p, size_t count, size_t thread, size_t threads)
{
    const size_t lines = (count * sizeof(float) + 127) / 128;
    for (size_t l = thread; l < lines; l += threads) {
        asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"((const char*)p + 128 * l) : "memory");
    }
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
    const unsigned long long pol = 0ull;
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
    if (hint) {   // for the next launch
        const size_t threads = (size_t)gridDim.x * gridDim.y * TILE * TILE;
        const size_t thread = ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * TILE * TILE + ty * TILE + tx;
        prefetch_evict_last(a, (size_t)m * k, thread, threads);
        prefetch_evict_last(b, (size_t)k * n, thread, threads);
    }
#endif
}
