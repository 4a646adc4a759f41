// kforge: grid = [cdiv(@@COLS@@, BX), cdiv(@@ROWS@@, SEG), 1]
// kforge: block = [BX, 1, 1]
// kforge: tune BX = [128, 256, 64]
// kforge: tune SEG = [64, 128, 32, 256]
// kforge: tune UNROLL = [4, 8, 2, 1]
// Bound pattern box_filter (down the columns; from cuda-samples' sliding-window boxFilter y pass):
// a thread owns one column of a segment of SEG rows -- the BX threads of a block read consecutive
// columns, so every load is coalesced.  It sums the 2r+1 values around the segment's first row
// once, then slides: each next row adds the value entering the window and subtracts the one
// leaving it (2 loads a pixel, the second from cache), edges clamped (KF_EDGE_CLAMP) or zero.
// Segments keep the grid full on tall images and bound the sliding sum's rounding drift.
// The slide takes UNROLL rows at a time, their 2 x UNROLL loads issued before the sums (one load in
// flight per thread left a 4096 x 4096 image at 61 % of copy bandwidth on the H100), and so does the
// first window's sum; the sums and their order are the same as one value at a time.
#ifndef BX
#define BX 128
#endif
#ifndef SEG
#define SEG 64
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#define KF_THREADS BX

__device__ __forceinline__ float kf_box_at(const kf_x_t* __restrict__ x, long long row, long long col,
                                           long long rows, long long cols)
{
#if KF_EDGE_CLAMP
    row = row < 0 ? 0 : (row >= rows ? rows - 1 : row);
    return kf_ld(x + row * cols + col);
#else
    return (row < 0 || row >= rows) ? 0.0f : kf_ld(x + row * cols + col);
#endif
}

__device__ __forceinline__ void kf_box_filter(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                              long long rows, long long cols, long long r)
{
    const long long col = (long long)blockIdx.x * BX + threadIdx.x;
    const long long r0 = (long long)blockIdx.y * SEG;
    if (col >= cols || r0 >= rows) return;
    const long long r1 = min(rows, r0 + SEG);
    const float scale = KF_MEAN ? 1.0f / (float)(2 * r + 1) : 1.0f;
    // the window around the first row, UNROLL loads issued before their sums (as a plain loop, NVRTC
    // unrolled it 4 at a time: a radius of 8 took 5 round trips a segment)
    float t = 0.0f;
    long long d = -r;
    for (; d + UNROLL <= r + 1; d += UNROLL) {
        float v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = kf_box_at(x, r0 + d + u, col, rows, cols);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) t += v[u];
    }
    for (; d <= r; ++d) t += kf_box_at(x, r0 + d, col, rows, cols);
    kf_st(y + r0 * cols + col, t * scale);
    long long row = r0 + 1;
    for (; row + UNROLL <= r1; row += UNROLL) {
        float in[UNROLL], out[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            in[u] = kf_box_at(x, row + u + r, col, rows, cols);
            out[u] = kf_box_at(x, row + u - r - 1, col, rows, cols);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            t += in[u] - out[u];
            kf_st(y + (row + u) * cols + col, t * scale);
        }
    }
    for (; row < r1; ++row) {
        t += kf_box_at(x, row + r, col, rows, cols) - kf_box_at(x, row - r - 1, col, rows, cols);
        kf_st(y + row * cols + col, t * scale);
    }
}
