// kforge: grid = [cdiv(@@COLS@@, BX * VEC), cdiv(@@ROWS@@, SEG), 1]
// kforge: block = [BX, 1, 1]
// kforge: tune BX = [128, 256, 64]
// kforge: tune SEG = [64, 128, 32, 256]
// kforge: tune UNROLL = [4, 8, 2, 1]
// kforge: tune VEC = [4, 1]
// Bound pattern box_filter (down the columns; from cuda-samples' sliding-window boxFilter y pass):
// a thread owns one column of a segment of SEG rows -- the BX threads of a block read consecutive
// columns, so every load is coalesced.  It sums the 2r+1 values around the segment's first row
// once, then slides: each next row adds the value entering the window and subtracts the one
// leaving it (2 loads a pixel, the second from cache), edges clamped (KF_EDGE_CLAMP) or zero.
// Segments keep the grid full on tall images and bound the sliding sum's rounding drift.
// The slide takes UNROLL rows at a time, their 2 x UNROLL loads issued before the sums (one load in
// flight per thread left a 4096 x 4096 image at 61 % of copy bandwidth on the H100), and so does the
// first window's sum; the sums and their order are the same as one value at a time.
// VEC = 4: a thread owns 4 adjacent columns and moves them as one 16-byte (float) or 8-byte (16-bit)
// access, four times the bytes in flight per load (a 4096 x 4096 image sat at 69 % of copy
// bandwidth on the H200 with one float per load, 84 % on the H100: the H200 needs more in flight);
// where the columns are not a multiple of 4 or a pointer is not aligned, the thread slides its 4
// columns one after another.  Each column's sums are the same in either form.
#ifndef BX
#define BX 128
#endif
#ifndef SEG
#define SEG 64
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef VEC
#define VEC 4
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

__device__ __forceinline__ void kf_box_column(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                              long long rows, long long cols, long long r, long long col)
{
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

#if VEC == 4
__device__ __forceinline__ float4 kf_box_at4(const kf_x_t* __restrict__ x, long long row, long long col,
                                             long long rows, long long cols)
{
#if KF_EDGE_CLAMP
    row = row < 0 ? 0 : (row >= rows ? rows - 1 : row);
    return kf_ld4(x + row * cols + col);
#else
    return (row < 0 || row >= rows) ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : kf_ld4(x + row * cols + col);
#endif
}

__device__ __forceinline__ float4 kf_box_scaled(float4 t, float s) { return make_float4(t.x * s, t.y * s, t.z * s, t.w * s); }

// the sliding window of kf_box_column on 4 adjacent columns at once (cols % 4 == 0, aligned rows)
__device__ __forceinline__ void kf_box_columns4(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                                long long rows, long long cols, long long r, long long col)
{
    const long long r0 = (long long)blockIdx.y * SEG;
    if (col >= cols || r0 >= rows) return;
    const long long r1 = min(rows, r0 + SEG);
    const float scale = KF_MEAN ? 1.0f / (float)(2 * r + 1) : 1.0f;
    float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    long long d = -r;
    for (; d + UNROLL <= r + 1; d += UNROLL) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = kf_box_at4(x, r0 + d + u, col, rows, cols);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) { t.x += v[u].x; t.y += v[u].y; t.z += v[u].z; t.w += v[u].w; }
    }
    for (; d <= r; ++d) {
        const float4 v = kf_box_at4(x, r0 + d, col, rows, cols);
        t.x += v.x; t.y += v.y; t.z += v.z; t.w += v.w;
    }
    kf_st4(y + r0 * cols + col, kf_box_scaled(t, scale));
    long long row = r0 + 1;
    for (; row + UNROLL <= r1; row += UNROLL) {
        float4 in[UNROLL], out[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            in[u] = kf_box_at4(x, row + u + r, col, rows, cols);
            out[u] = kf_box_at4(x, row + u - r - 1, col, rows, cols);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            t.x += in[u].x - out[u].x; t.y += in[u].y - out[u].y;
            t.z += in[u].z - out[u].z; t.w += in[u].w - out[u].w;
            kf_st4(y + (row + u) * cols + col, kf_box_scaled(t, scale));
        }
    }
    for (; row < r1; ++row) {
        const float4 in = kf_box_at4(x, row + r, col, rows, cols), out = kf_box_at4(x, row - r - 1, col, rows, cols);
        t.x += in.x - out.x; t.y += in.y - out.y; t.z += in.z - out.z; t.w += in.w - out.w;
        kf_st4(y + row * cols + col, kf_box_scaled(t, scale));
    }
}
#endif

__device__ __forceinline__ void kf_box_filter(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                              long long rows, long long cols, long long r)
{
    const long long col = ((long long)blockIdx.x * BX + threadIdx.x) * VEC;
#if VEC == 4
    if (cols % 4 == 0 && kf_aligned4(x) && kf_aligned4(y)) {
        kf_box_columns4(x, y, rows, cols, r, col);
        return;
    }
#endif
#pragma unroll 1
    for (int v = 0; v < VEC; ++v) kf_box_column(x, y, rows, cols, r, col + v);
}
