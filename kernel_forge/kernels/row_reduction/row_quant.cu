// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [32 * WPR * RPB, 1, 1]
// kforge: tune WPR = [1, 2, 4, 8]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: constraint 32 * WPR * RPB <= 1024 and 32 * WPR * RPB >= 64
// Bound pattern row_quant: dynamic int8 quantization of each row with its own scale (a token's
// activations, as vLLM's and TensorRT-LLM's per-token quantization kernels do): s = max |x| / 127,
// written to scale[row]; q = saturate(rint(x * (127 / max |x|))) (KF_DIVIDE: rint(x / s)).  WPR warps
// own a row, RPB rows per block; the first pass takes the row's largest magnitude (4 values a load
// when cols % 4 == 0 and the buffers are aligned), warp shuffles then the row's warps through shared
// memory; the second pass reads the row again (from L2) and writes 4 int8 values a store.  A row of
// zeros has scale 0 and writes zeros.
#ifndef WPR
#define WPR 1
#endif
#ifndef RPB
#define RPB 4
#endif
#ifndef KF_DIVIDE
#define KF_DIVIDE 0
#endif
#define KF_THREADS (32 * WPR * RPB)
#define TPR (32 * WPR)

__device__ __forceinline__ float kf_q(float v, float mul, float s)
{
    return KF_DIVIDE ? (s > 0.0f ? v / s : 0.0f) : v * mul;
}

__device__ __forceinline__ void kf_row_quant(const kf_x_t* __restrict__ x, kf_q_t* __restrict__ q,
                                             kf_y_t* __restrict__ scale, long long rows, long long cols)
{
#if WPR > 1
    __shared__ float part[RPB][WPR];
#endif
    const int sub = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + sub;
    const bool valid = row < rows;
    const long long n = valid ? cols : 0;
    const kf_x_t* __restrict__ xr = x + (valid ? row : 0) * cols;
    kf_q_t* __restrict__ qr = q + (valid ? row : 0) * cols;
    const bool vec = cols % 4 == 0 && kf_aligned4(x) && kf_aligned4(q);
    float m = 0.0f;
    if (vec) {
        for (long long j = 4LL * t; j < n; j += 4LL * TPR) {
            const float4 a = kf_ld4(xr + j);
            m = fmaxf(m, fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))));
        }
    } else {
        for (long long j = t; j < n; j += TPR) m = fmaxf(m, fabsf(kf_ld(xr + j)));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
#if WPR > 1
    if ((t & 31) == 0) part[sub][t >> 5] = m;
    __syncthreads();
    m = 0.0f;
#pragma unroll
    for (int k = 0; k < WPR; ++k) m = fmaxf(m, part[sub][k]);
#endif
    const float s = m / 127.0f;
    const float mul = m > 0.0f ? 127.0f / m : 0.0f;
    if (valid && t == 0) kf_st(scale + row, s);
    if (vec) {
        for (long long j = 4LL * t; j < n; j += 4LL * TPR) {
            const float4 a = kf_ld4(xr + j);
            kf_st4(qr + j, make_float4(kf_q(a.x, mul, s), kf_q(a.y, mul, s), kf_q(a.z, mul, s), kf_q(a.w, mul, s)));
        }
    } else {
        for (long long j = t; j < n; j += TPR) kf_st(qr + j, kf_q(kf_ld(xr + j), mul, s));
    }
}
