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

// one column (float) or 4 adjacent ones (float4): the load of a row (edges clamped or zero), the
// running sums, the store
__device__ __forceinline__ float kf_box_load(const kf_x_t* p, float*) { return kf_ld(p); }
__device__ __forceinline__ float4 kf_box_load(const kf_x_t* p, float4*) { return kf_ld4(p); }
__device__ __forceinline__ void kf_box_store(kf_y_t* p, float t, float s) { kf_st(p, t * s); }
__device__ __forceinline__ void kf_box_store(kf_y_t* p, float4 t, float s)
{
    kf_st4(p, make_float4(t.x * s, t.y * s, t.z * s, t.w * s));
}
__device__ __forceinline__ void kf_box_add(float& t, float v) { t += v; }
__device__ __forceinline__ void kf_box_add(float4& t, float4 v) { t.x += v.x; t.y += v.y; t.z += v.z; t.w += v.w; }
__device__ __forceinline__ void kf_box_slide(float& t, float in, float out) { t += in - out; }
__device__ __forceinline__ void kf_box_slide(float4& t, float4 in, float4 out)
{
    t.x += in.x - out.x; t.y += in.y - out.y; t.z += in.z - out.z; t.w += in.w - out.w;
}

template <typename V>
__device__ __forceinline__ V kf_box_at(const kf_x_t* __restrict__ x, long long row, long long col,
                                       long long rows, long long cols)
{
#if KF_EDGE_CLAMP
    row = row < 0 ? 0 : (row >= rows ? rows - 1 : row);
#else
    if (row < 0 || row >= rows) return V{};
#endif
    return kf_box_load(x + row * cols + col, (V*)nullptr);
}

// the sliding window down column col (V = float) or columns col..col+3 (V = float4: cols % 4 == 0,
// the rows aligned) over this block's segment of rows
template <typename V>
__device__ __forceinline__ void kf_box_slide_down(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                                  long long rows, long long cols, long long r, long long col)
{
    const long long r0 = (long long)blockIdx.y * SEG;
    if (col >= cols || r0 >= rows) return;
    const long long r1 = min(rows, r0 + SEG);
    const float scale = KF_MEAN ? 1.0f / (float)(2 * r + 1) : 1.0f;
    // the window around the first row, UNROLL loads issued before their sums (as a plain loop, NVRTC
    // unrolled it 4 at a time: a radius of 8 took 5 round trips a segment)
    V t{};
    long long d = -r;
    for (; d + UNROLL <= r + 1; d += UNROLL) {
        V v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = kf_box_at<V>(x, r0 + d + u, col, rows, cols);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) kf_box_add(t, v[u]);
    }
    for (; d <= r; ++d) kf_box_add(t, kf_box_at<V>(x, r0 + d, col, rows, cols));
    kf_box_store(y + r0 * cols + col, t, scale);
    long long row = r0 + 1;
    for (; row + UNROLL <= r1; row += UNROLL) {
        V in[UNROLL], out[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            in[u] = kf_box_at<V>(x, row + u + r, col, rows, cols);
            out[u] = kf_box_at<V>(x, row + u - r - 1, col, rows, cols);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            kf_box_slide(t, in[u], out[u]);
            kf_box_store(y + (row + u) * cols + col, t, scale);
        }
    }
    for (; row < r1; ++row) {
        kf_box_slide(t, kf_box_at<V>(x, row + r, col, rows, cols), kf_box_at<V>(x, row - r - 1, col, rows, cols));
        kf_box_store(y + row * cols + col, t, scale);
    }
}

__device__ __forceinline__ void kf_box_filter(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                              long long rows, long long cols, long long r)
{
    const long long col = ((long long)blockIdx.x * BX + threadIdx.x) * VEC;
    if (VEC == 4 && cols % 4 == 0 && kf_aligned4(x) && kf_aligned4(y)) {
        kf_box_slide_down<float4>(x, y, rows, cols, r, col);
        return;
    }
#pragma unroll 1
    for (int v = 0; v < VEC; ++v) kf_box_slide_down<float>(x, y, rows, cols, r, col + v);
}
