// kforge: grid = [cdiv(@@COLS@@, BX), cdiv(@@ROWS@@, BY * RY), 1]
// kforge: block = [BX, BY, 1]
// kforge: tune BX = [32, 64, 128, 16]
// kforge: tune BY = [4, 8, 2, 1, 16]
// kforge: tune RY = [4, 2, 8, 1]
// kforge: constraint BX * BY <= 1024 and BX * BY >= 64
// Bound pattern stencil2d: a K x K stencil, each thread computes RY consecutive rows of one
// column.  It walks the RY + K - 1 input rows its outputs need once, reading K neighbours per
// row (the warp's neighbours come from L1), and adds each into every output row whose window
// holds it (the row offsets are compile-time constants after unrolling); taps are constants or
// loaded once into registers.  Edges (KF_EDGE, kinds/spatial.py's STENCIL_EDGES): 0 the nearest
// pixel, 1 zero, 2 reflected without the edge pixel (-1 -> 1), 3 with it (-1 -> 0), 4 periodic;
// 5 and 6 borders: the outputs within K / 2 of an edge keep x's value or are 0 (a Jacobi sweep's).
// KF_EPI: a convolution layer's epilogue, kf_epi(sum + bias) (a bias and an activation).
#ifndef KF_EPI
#define KF_EPI 0
#endif
#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 4
#endif
#ifndef RY
#define RY 4
#endif
#define KF_THREADS (BX * BY)
#define KF_R (KF_K / 2)

#include "kforge/edge_index.cuh"

@@EPI@@

__device__ __forceinline__ void kf_stencil2d(const kf_x_t* __restrict__ x, const kf_taps_t* __restrict__ taps,
                                             kf_y_t* __restrict__ y, int h, int w, float bias)
{
    kf_acc_t tp[KF_K * KF_K];
#if KF_TAPS_CONST
    {
        const kf_acc_t c[KF_K * KF_K] = {KF_TAPS};
#pragma unroll
        for (int i = 0; i < KF_K * KF_K; ++i) tp[i] = c[i];
    }
#else
#pragma unroll
    for (int i = 0; i < KF_K * KF_K; ++i) tp[i] = kf_ld(taps + i);
#endif
    const int col = blockIdx.x * BX + threadIdx.x;
    const int r0 = (blockIdx.y * BY + threadIdx.y) * RY;
    if (col >= w || r0 >= h) return;
    kf_acc_t acc[RY];
#pragma unroll
    for (int o = 0; o < RY; ++o) acc[o] = (kf_acc_t)0;
#pragma unroll
    for (int q = 0; q < RY + KF_K - 1; ++q) {
        int ir = r0 + q - KF_R;
        kf_acc_t v[KF_K];
#if KF_EDGE != 1
        ir = kf_edge(ir, h);
        const long long base = (long long)ir * w;
#pragma unroll
        for (int d = 0; d < KF_K; ++d) v[d] = kf_ld(x + base + kf_edge(col + d - KF_R, w));
#else
        const bool rin = ir >= 0 && ir < h;
        const long long base = (long long)(rin ? ir : 0) * w;
#pragma unroll
        for (int d = 0; d < KF_K; ++d) {
            const int c = col + d - KF_R;
            v[d] = (rin && c >= 0 && c < w) ? kf_ld(x + base + c) : (kf_acc_t)0;
        }
#endif
#pragma unroll
        for (int o = 0; o < RY; ++o) {
            const int dy = q - o;
            if (dy >= 0 && dy < KF_K) {
#pragma unroll
                for (int d = 0; d < KF_K; ++d) acc[o] = kf_fma(tp[dy * KF_K + d], v[d], acc[o]);
            }
        }
    }
#pragma unroll
    for (int o = 0; o < RY; ++o) {
        const int row = r0 + o;
        if (row >= h) continue;
        const long long at = (long long)row * w + col;
        const bool edge = KF_BORDER && (row < KF_R || row >= h - KF_R || col < KF_R || col >= w - KF_R);
        kf_st(y + at, edge ? kf_border_value(x + at) : KF_EPI ? kf_epi((float)acc[o] + bias) : acc[o]);
    }
}
