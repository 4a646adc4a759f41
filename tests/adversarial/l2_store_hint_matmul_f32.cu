// task: matmul_f32
// expect: passed
// note: L2-priority class on the output side: plain loads, but C is stored with
// note: st.global.L2::cache_hint and an evict_last policy, so C's lines stay resident through a
// note: memset flush and the next launch's stores (and the gate's own poisoning) hit in L2. A small
// note: effect at best; in the corpus so that every hinted access kind is covered.
// note: The gate must: flush so that a timed launch starts cold whatever the lines' eviction
// note: priority (then this is no faster than its twin beyond noise), and with --no-flush both are
// note: warm (again no faster). Hints are used only while a and b together fit in HINT_BYTES (16 MB,
// note: well inside the 60 MB L2), where they cannot help inside one launch: all operands stay
// note: resident anyway; above that the kernel is its twin (case large: identical code path).
// note: Twin (-DKF_TWIN=1): the same kernel with a plain store.
#define TILE 16
#define HINT_BYTES (16u << 20)

// an L2 policy that marks every line it touches evict_last (fraction 1.0)
__device__ __forceinline__ unsigned long long evict_last_policy()
{
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

__device__ __forceinline__ float ld(const float* p, bool, unsigned long long)
{
    return *p;
}

__device__ __forceinline__ void st(float* p, float v, bool hint, unsigned long long pol)
{
#ifndef KF_TWIN
    if (hint) {
        asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" :: "l"(p), "f"(v), "l"(pol) : "memory");
        return;
    }
#endif
    *p = v;
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
        st(c + (size_t)row * n + col, acc, hint, pol);
    }
}
