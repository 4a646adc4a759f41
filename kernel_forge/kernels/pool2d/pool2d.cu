// kforge: grid = [@@OUT_ROWS@@, max(1, cdiv(@@OUT_COLS@@, BLOCK * VPT)), 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [128, 256, 64, 512]
// kforge: tune VPT = [2, 1, 4]
// Bound pattern pool2d: KF_S x KF_S windows with stride KF_S (no padding, the last partial window
// dropped, as PyTorch's default floor mode) over planes of rows x cols, their max (KF_MAX), mean
// (KF_MEAN) or sum.  Block (r, t) owns output row r of all planes (its plane and row from one
// division per block) and BLOCK * VPT of its outputs; a warp reads KF_S rows of 32 * KF_S
// consecutive values each (coalesced), every load of a thread's VPT windows issued before its
// first store.
#ifndef BLOCK
#define BLOCK 128
#endif
#ifndef VPT
#define VPT 2
#endif
#define KF_THREADS BLOCK

__device__ __forceinline__ void kf_pool2d(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y, long long rows,
                                          long long cols)
{
    const long long out_rows = rows / KF_S, out_cols = cols / KF_S;
    const long long r = blockIdx.x;                       // an output row of every plane, in order
    const long long plane = r / out_rows, oy = r - plane * out_rows;
    const kf_x_t* __restrict__ xr = x + (plane * rows + oy * KF_S) * cols;
    kf_y_t* __restrict__ yr = y + r * out_cols;
    const long long c0 = (long long)blockIdx.y * (BLOCK * VPT) + threadIdx.x;
    float acc[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const long long ox = c0 + (long long)i * BLOCK;
        acc[i] = KF_MAX ? -__int_as_float(0x7f800000) : 0.0f;
        if (ox < out_cols) {
#pragma unroll
            for (int dy = 0; dy < KF_S; ++dy) {
#pragma unroll
                for (int dx = 0; dx < KF_S; ++dx) {
                    const float v = kf_ld(xr + dy * cols + ox * KF_S + dx);
                    acc[i] = KF_MAX ? fmaxf(acc[i], v) : acc[i] + v;
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const long long ox = c0 + (long long)i * BLOCK;
        if (ox < out_cols) kf_st(yr + ox, KF_MEAN ? acc[i] * (1.0f / (KF_S * KF_S)) : acc[i]);
    }
}
