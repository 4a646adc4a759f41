// task: matmul_f32
// expect: passed
// note: L2-priority class, the kernel of issue 10 ("L2 residency across the flush"): a 16x16 tiled
// note: matmul whose global loads of a and b carry an L2 evict_last policy (createpolicy.fractional
// note: .L2::evict_last + ld.global.L2::cache_hint). A memset flush does not evict evict_last lines
// note: (probe 2026-12-01), so the next timed launch finds a and b in L2: measured 11.49 us (sq256)
// note: and 14.96 us (rect) against 15.41 / 17.98 us for the plain loads: a 1.21x better score for
// note: nothing.
// note: The gate must: flush so that a timed launch starts cold whatever the lines' eviction
// note: priority (then this is no faster than its twin beyond noise), and with --no-flush both are
// note: warm (again no faster). Hints are used only while a and b together fit in HINT_BYTES (16 MB,
// note: well inside the 60 MB L2), where they cannot help inside one launch: all operands stay
// note: resident anyway; above that the kernel is its twin (case large: identical code path).
// note: Twin (-DKF_TWIN=1): the same kernel with plain loads.
#define TILE 16
#define HINT_BYTES (16u << 20)

// an L2 policy that marks every line it touches evict_last (fraction 1.0)
__device__ __forceinline__ unsigned long long evict_last_policy()
{
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

// a load carrying the policy; the twin loads plainly
__device__ __forceinline__ float ld(const float* p, bool hint, unsigned long long pol)
{
#ifndef KF_TWIN
    if (hint) {
        float v;
        asm("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(pol));
        return v;
    }
#endif
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
}
