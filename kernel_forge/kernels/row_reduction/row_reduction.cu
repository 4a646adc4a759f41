// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [32 * WPR * RPB, 1, 1]
// kforge: tune WPR = [1, 2, 4, 8]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: constraint 32 * WPR * RPB <= 1024 and 32 * WPR * RPB >= 64
// Bound pattern row_reduction: WPR warps own a row, RPB rows per block; 4 values per access when
// cols % 4 == 0 and the buffer is aligned (evict-first: x is read once), warp shuffles, then the
// row's warps through shared memory in a fixed order.  Rows may be segments of a flat array whose
// last one is short (a sum per 2 * blockDim values, as CUDA's classic reduction kernels write).
// outer > 1: row r is the outer runs x[(o * rows + r) * cols ...], o < outer (the sum over N and
// H*W of channel r of an NCHW tensor: a conv's bias gradient).
#ifndef WPR
#define WPR 1
#endif
#ifndef RPB
#define RPB 4
#endif
#define KF_THREADS (32 * WPR * RPB)
#ifndef KF_MUL
#define KF_MUL 0
#endif
#ifndef KF_HAS_BIAS
#define KF_HAS_BIAS 0
#endif
#define TPR (32 * WPR)

#include "kforge/reduce_op.cuh"

// KF_MUL: the values summed are x * w, w of the matrix's size (1: row-wise dot products) or one row's
// length (2: a matrix-vector product; w is read by every row, so it is loaded through the caches)
// (x - w under KF_DIFF: each row's squared or absolute distance to w's row, or to the one vector w);
// KF_HAS_BIAS: a bias of one value a row added to each sum (a linear layer's A x + b).  KF_F64: double
// storage, accumulated in double (dgemv).
__device__ __forceinline__ void kf_row_reduction(const kf_x_t* __restrict__ x, const kf_w_t* __restrict__ w,
                                                 const kf_bias_t* __restrict__ bias, kf_y_t* __restrict__ y,
                                                 long long rows, long long cols, long long total, long long outer,
                                                 long long ldx)
{
#if WPR > 1
    __shared__ kf_reduce_t part[RPB][WPR];
#endif
    const kf_reduce_t init = kf_reduce_init();
    const int sub = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + sub;
    const bool valid = row < rows;
    // the row's values: cols, or fewer in the last of segments that do not fill it (total < rows * cols)
    const long long ncols = valid ? min(cols, total - row * cols) : 0;
    kf_reduce_t a0 = init, a1 = init;
    for (long long o = 0; o < outer; ++o) {
        const kf_x_t* __restrict__ xr = x + (o * rows + (valid ? row : 0)) * ldx;     // rows ldx apart (>= cols)
        const kf_w_t* __restrict__ wr = w + (KF_MUL == 1 ? (valid ? row : 0) * cols : 0);
        if (cols % 4 == 0 && ldx % 4 == 0 && ncols == cols && kf_aligned4(x) && kf_aligned4(w)) {
            for (long long j = 4LL * t; j < ncols; j += 4LL * TPR) {
                auto q = kf_lds4(xr + j);
                if (KF_MUL) {
                    q = kf_pair4(q, KF_MUL == 1 ? kf_lds4(wr + j) : kf_ld4(wr + j));
                }
                q.x = kf_pre(q.x); q.y = kf_pre(q.y); q.z = kf_pre(q.z); q.w = kf_pre(q.w);
                a0 = kf_combine_op(a0, kf_combine_op(q.x, q.y));
                a1 = kf_combine_op(a1, kf_combine_op(q.z, q.w));
            }
        } else {
            for (long long j = t; j < ncols; j += TPR) {
                a0 = kf_combine_op(a0, kf_pre(KF_MUL ? kf_pair(kf_ld(xr + j), kf_ld(wr + j)) : kf_ld(xr + j)));
            }
        }
    }
    kf_reduce_t a = kf_combine_op(a0, a1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = kf_combine_op(a, __shfl_xor_sync(0xffffffffu, a, o));
#if WPR > 1
    if ((threadIdx.x & 31) == 0) part[sub][t >> 5] = a;
    __syncthreads();
    a = part[sub][0];
#pragma unroll
    for (int k = 1; k < WPR; ++k) a = kf_combine_op(a, part[sub][k]);
#endif
    if (valid && t == 0) kf_put(y + row, (KF_OP_MEAN ? a / (kf_reduce_t)(cols * outer) : a) + (KF_HAS_BIAS ? (kf_reduce_t)kf_ld(bias + row) : (kf_reduce_t)0));
}
