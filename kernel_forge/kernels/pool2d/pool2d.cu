// kforge: grid = [@@OUT_ROWS@@, max(1, cdiv(@@OUT_COLS@@, BLOCK * VPT)), 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [128, 256, 64, 512]
// kforge: tune VPT = [2, 1, 4]
// Bound pattern pool2d: KF_K x KF_K windows with stride KF_STRIDE and KF_PAD rows and columns of
// padding on every side (the last partial window dropped, as PyTorch's default floor mode) over
// planes of rows x cols, their max (KF_MAX: the padding never wins), mean (KF_MEAN: over K * K
// values, the padding counted as zeros; KF_MEAN_VALID: over the values inside the image) or sum.
// Block (r, t) owns output row r of all planes (its plane and row from one division per block) and
// BLOCK * VPT of its outputs; a warp reads KF_K rows of 32 * KF_STRIDE consecutive values each
// (coalesced), every load of a thread's VPT windows issued before its first store.  Without padding
// the bounds checks compile away.  KF_INDICES (with KF_MAX): each maximum's place in its plane
// (row * cols + col, the first of equal values in the window's row-major order) written to `indices`
// too, as PyTorch's max_pool2d_with_indices keeps it for the backward.
#ifndef KF_INDICES
#define KF_INDICES 0
#endif
#ifndef BLOCK
#define BLOCK 128
#endif
#ifndef VPT
#define VPT 2
#endif
#ifndef KF_MEAN_VALID
#define KF_MEAN_VALID 0
#endif
#define KF_THREADS BLOCK

__device__ __forceinline__ void kf_pool2d(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y, long long rows,
                                          long long cols, kf_indices_t* __restrict__ indices)
{
    const long long out_rows = (rows + 2 * KF_PAD - KF_K) / KF_STRIDE + 1;
    const long long out_cols = (cols + 2 * KF_PAD - KF_K) / KF_STRIDE + 1;
    const long long r = blockIdx.x;                       // an output row of every plane, in order
    const long long plane = r / out_rows, oy = r - plane * out_rows;
    const long long iy0 = oy * KF_STRIDE - KF_PAD;
    const kf_x_t* __restrict__ xp = x + plane * rows * cols;
    kf_y_t* __restrict__ yr = y + r * out_cols;
    const long long c0 = (long long)blockIdx.y * (BLOCK * VPT) + threadIdx.x;
    float acc[VPT];
    int cnt[VPT];
    long long at[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const long long ox = c0 + (long long)i * BLOCK;
        acc[i] = KF_MAX ? -__int_as_float(0x7f800000) : 0.0f;
        cnt[i] = 0;
        at[i] = 0;
        if (ox < out_cols) {
            const long long ix0 = ox * KF_STRIDE - KF_PAD;
#pragma unroll
            for (int dy = 0; dy < KF_K; ++dy) {
                const long long iy = iy0 + dy;
                if (KF_PAD && (iy < 0 || iy >= rows)) continue;
#pragma unroll
                for (int dx = 0; dx < KF_K; ++dx) {
                    const long long ix = ix0 + dx;
                    if (KF_PAD && (ix < 0 || ix >= cols)) continue;
                    const float v = kf_ld(xp + iy * cols + ix);
                    if (KF_INDICES) {
                        if (v > acc[i] || cnt[i] == 0) {
                            acc[i] = v;
                            at[i] = iy * cols + ix;
                        }
                    } else {
                        acc[i] = KF_MAX ? fmaxf(acc[i], v) : acc[i] + v;
                    }
                    ++cnt[i];
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const long long ox = c0 + (long long)i * BLOCK;
        if (ox < out_cols) {
            kf_st(yr + ox, KF_MEAN ? acc[i] * (1.0f / (KF_K * KF_K)) : KF_MEAN_VALID ? acc[i] / (float)cnt[i] : acc[i]);
            if (KF_INDICES) indices[r * out_cols + ox] = (kf_indices_t)at[i];
        }
    }
}
