// kforge: grid = [@@OUT_ROWS@@, max(1, cdiv(@@OUT_COLS@@, BLOCK * VPT)), 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [128, 256, 64, 512]
// kforge: tune VPT = [4, 2, 1, 8]
// Bound pattern resample: nearest-neighbour upsampling by an integer factor KF_S (2, 3 or 4) of the
// planes of rows x cols (PyTorch's interpolate(mode="nearest", scale_factor=S), a U-Net's or a
// detector's upsampling): y[p, i, j] = x[p, i / S, j / S].  Block (r, t) owns output row r of all
// planes -- its input row is r / S, one division by a constant per block -- and BLOCK * VPT of its
// columns; a warp writes 32 consecutive values per store (coalesced) and reads 32 / S consecutive
// inputs, every load of a thread issued before its first store.  Each input value is read S * S
// times, from L1 or L2 after the first: DRAM sees x once and y once.
#ifndef BLOCK
#define BLOCK 128
#endif
#ifndef VPT
#define VPT 4
#endif
#define KF_THREADS BLOCK

__device__ __forceinline__ void kf_upsample_nearest(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                                    int cols)
{
    const long long r = blockIdx.x;                        // an output row of all planes
    const int out_cols = cols * KF_S;
    const kf_x_t* __restrict__ xr = x + (r / KF_S) * cols;
    kf_y_t* __restrict__ yr = y + r * out_cols;
    const int first = blockIdx.y * (BLOCK * VPT) + threadIdx.x;
    float v[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = first + k * BLOCK;
        v[k] = c < out_cols ? kf_ld(xr + c / KF_S) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = first + k * BLOCK;
        if (c < out_cols) kf_st(yr + c, v[k]);
    }
}
