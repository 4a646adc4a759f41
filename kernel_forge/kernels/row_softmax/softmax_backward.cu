// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [32 * WPR * RPB, 1, 1]
// kforge: tune WPR = [1, 2, 4, 8]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: constraint 32 * WPR * RPB <= 1024 and 32 * WPR * RPB >= 64
// Bound pattern softmax_backward: the gradient through a softmax of each row, dx = scale * p * (g - sum(p * g))
// from the softmax's output p and the output's gradient g (KF_LOG: through a log-softmax, p its output,
// dx = g - exp(p) * sum(g)).  WPR warps own a row, RPB rows per block; the first pass sums the row (4 values
// a load when cols % 4 == 0 and the buffers are aligned), warp shuffles then the row's warps through shared
// memory in a fixed order; the second pass reads the row again (from L2) and writes dx, evict-first.
#ifndef WPR
#define WPR 1
#endif
#ifndef RPB
#define RPB 4
#endif
#ifndef KF_LOG
#define KF_LOG 0
#endif
#define KF_THREADS (32 * WPR * RPB)
#define TPR (32 * WPR)

__device__ __forceinline__ float kf_sb_term(float p, float g) { return KF_LOG ? g : p * g; }
__device__ __forceinline__ float kf_sb_out(float p, float g, float dot, float scale)
{
    return KF_LOG ? scale * (g - __expf(p) * dot) : scale * p * (g - dot);
}

__device__ __forceinline__ void kf_softmax_backward(const kf_x_t* __restrict__ p, const kf_g_t* __restrict__ g,
                                                    kf_y_t* __restrict__ y, long long rows, long long cols,
                                                    float scale)
{
#if WPR > 1
    __shared__ float part[RPB][WPR];
#endif
    const int sub = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + sub;
    const bool valid = row < rows;
    const long long n = valid ? cols : 0;
    const kf_x_t* __restrict__ pr = p + (valid ? row : 0) * cols;
    const kf_g_t* __restrict__ gr = g + (valid ? row : 0) * cols;
    kf_y_t* __restrict__ yr = y + (valid ? row : 0) * cols;
    const bool vec = cols % 4 == 0 && kf_aligned4(p) && kf_aligned4(g) && kf_aligned4(y);
    float acc = 0.0f;
    if (vec) {
        for (long long j = 4LL * t; j < n; j += 4LL * TPR) {
            const float4 a = kf_ld4(pr + j), b = kf_ld4(gr + j);
            acc += kf_sb_term(a.x, b.x) + kf_sb_term(a.y, b.y) + kf_sb_term(a.z, b.z) + kf_sb_term(a.w, b.w);
        }
    } else {
        for (long long j = t; j < n; j += TPR) acc += kf_sb_term(kf_ld(pr + j), kf_ld(gr + j));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
#if WPR > 1
    if ((t & 31) == 0) part[sub][t >> 5] = acc;
    __syncthreads();
    acc = 0.0f;
#pragma unroll
    for (int k = 0; k < WPR; ++k) acc += part[sub][k];
#endif
    if (vec) {
        for (long long j = 4LL * t; j < n; j += 4LL * TPR) {
            const float4 a = kf_ld4(pr + j), b = kf_ld4(gr + j);
            kf_sts4(yr + j, make_float4(kf_sb_out(a.x, b.x, acc, scale), kf_sb_out(a.y, b.y, acc, scale),
                                        kf_sb_out(a.z, b.z, acc, scale), kf_sb_out(a.w, b.w, acc, scale)));
        }
    } else {
        for (long long j = t; j < n; j += TPR) kf_st(yr + j, kf_sb_out(kf_ld(pr + j), kf_ld(gr + j), acc, scale));
    }
}
