// task: matmul_f32
// expect: passed
// note: L2-priority class, range-based policies: createpolicy.range.global.L2::evict_last.
// note: L2::evict_first over exactly the bytes of a, and another over the bytes of b, each used by
// note: that operand's loads (ld.global.L2::cache_hint). The same residency trick as
// note: l2_evict_last_loads_matmul_f32.cu through the other kind of policy.
// note: The gate must: flush so that a timed launch starts cold whatever the lines' eviction
// note: priority (then this is no faster than its twin beyond noise), and with --no-flush both are
// note: warm (again no faster). Hints are used only while a and b together fit in HINT_BYTES (16 MB,
// note: well inside the 60 MB L2), where they cannot help inside one launch: all operands stay
// note: resident anyway; above that the kernel is its twin (case large: identical code path).
// note: Twin (-DKF_TWIN=1): the same kernel with plain loads.
#define TILE 16
#define HINT_BYTES (16u << 20)

// evict_last over [p, p + bytes), evict_first beyond (nothing is loaded beyond)
__device__ __forceinline__ unsigned long long range_policy(const float* p, unsigned int bytes)
{
    unsigned long long pol;
    asm volatile("createpolicy.range.global.L2::evict_last.L2::evict_first.b64 %0, [%1], %2, %3;"
                 : "=l"(pol) : "l"(p), "r"(bytes), "r"(bytes));
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
    // sizes fit in 32 bits whenever hint is set
    const unsigned long long pol_a = hint ? range_policy(a, (unsigned int)(4ull * m * k)) : 0ull;
    const unsigned long long pol_b = hint ? range_policy(b, (unsigned int)(4ull * k * n)) : 0ull;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        const int ka = t + tx, kb = t + ty;
        as[ty][tx] = (row < m && ka < k) ? ld(a + (size_t)row * k + ka, hint, pol_a) : 0.0f;
        bs[ty][tx] = (kb < k && col < n) ? ld(b + (size_t)kb * n + col, hint, pol_b) : 0.0f;
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
