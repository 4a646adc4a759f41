// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [32 * WPR * RPB, 1, 1]
// kforge: tune WPR = [1, 2, 4, 8]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: constraint 32 * WPR * RPB <= 1024 and 32 * WPR * RPB >= 64
// Bound pattern row_argmax: the column of each row's largest value (KF_ARGMIN: smallest), the first
// one on ties and a NaN before any number, as NumPy and PyTorch answer (greedy decoding's argmax
// over the vocabulary).  WPR warps own a row, RPB rows per block; 4 values per access when
// cols % 4 == 0 and x is aligned (evict-first: x is read once); (value, column) pairs combined by
// warp shuffles, then the row's warps through shared memory.  The order of combining cannot change
// the answer: the first-index rule makes it exact.  KF_VALUES: the value found written to `values` too
// (torch.max(x, dim=1)'s values beside its indices).
#ifndef KF_VALUES
#define KF_VALUES 0
#endif
#ifndef WPR
#define WPR 1
#endif
#ifndef RPB
#define RPB 4
#endif
#ifndef KF_ARGMIN
#define KF_ARGMIN 0
#endif
#define KF_THREADS (32 * WPR * RPB)
#define TPR (32 * WPR)

#include "kforge/arg_pair.cuh"

__device__ __forceinline__ void kf_row_argmax(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                              long long rows, int cols, kf_values_t* __restrict__ values)
{
#if WPR > 1
    __shared__ float part_v[RPB][WPR];
    __shared__ int part_i[RPB][WPR];
#endif
    const int sub = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + sub;
    const bool valid = row < rows;
    const int ncols = valid ? cols : 0;
    const kf_x_t* __restrict__ xr = x + (valid ? row : 0) * (long long)cols;
    float v = KF_ARGMIN ? __int_as_float(0x7f800000) : -__int_as_float(0x7f800000);
    int i = 0x7fffffff;
    if (cols % 4 == 0 && kf_aligned4(x)) {
        for (int j = 4 * t; j < ncols; j += 4 * TPR) {
            const float4 q = kf_lds4(xr + j);
            kf_take(v, i, q.x, j);
            kf_take(v, i, q.y, j + 1);
            kf_take(v, i, q.z, j + 2);
            kf_take(v, i, q.w, j + 3);
        }
    } else {
        for (int j = t; j < ncols; j += TPR) kf_take(v, i, kf_ld(xr + j), j);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        kf_take(v, i, ov, oi);
    }
#if WPR > 1
    if ((threadIdx.x & 31) == 0) {
        part_v[sub][t >> 5] = v;
        part_i[sub][t >> 5] = i;
    }
    __syncthreads();
    v = part_v[sub][0];
    i = part_i[sub][0];
#pragma unroll
    for (int k = 1; k < WPR; ++k) kf_take(v, i, part_v[sub][k], part_i[sub][k]);
#endif
    if (valid && t == 0 && cols > 0) {
        y[row] = (kf_y_t)i;
#if KF_VALUES
        kf_st(values + row, v);
#endif
    }
}
