// kforge: grid = [cdiv(@@COLS@@, BX), cdiv(@@OUT_ROWS@@, BY * RY), min(@@PLANES@@, 65535)]
// kforge: block = [BX, BY, 1]
// kforge: tune BX = [32, 64, 16]
// kforge: tune BY = [8, 4, 16]
// kforge: tune RY = [4, 2, 8]
// kforge: constraint BX * BY >= 64 and BX * BY <= 1024
// Bound pattern stencil1d_cols: a 1-D convolution down each column of rows x cols planes (the
// column pass of a separable filter, cuda-samples' convolutionColumnsKernel): y[p, i, c] = sum_j
// t[j] * x[p, i - KF_OFF + j, c], the taps a buffer of k values (k a parameter) or KF_K constants,
// KF_FLIP reversed; edges as stencil1d's.  Block (bx, by, p) owns BY * RY output rows of BX columns
// of plane p (planes beyond the grid's 65,535 loop): their BY * RY + k - 1 input rows go to shared
// memory, each row's BX values one coalesced load (a thread's RY rows all issued before the first
// is stored, the halo's after); then each thread sums its RY outputs of one column from shared memory.  DRAM sees x once
// (plus the halo rows, k - 1 per BY * RY) and y once.  A mask longer than KF_CHUNK taps is applied
// KF_CHUNK taps at a time, the sums in registers.
#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 8
#endif
#ifndef RY
#define RY 4
#endif
#define KF_THREADS (BX * BY)
#define KF_TROWS (BY * RY)
#if KF_TAPS_CONST
#define KF_CHUNK KF_K                 // constant taps: one chunk, k - 1 rows of halo
#else
#define KF_CHUNK 64
#endif

#include "kforge/edge_index.cuh"

// x at row i of a column of n rows (stride cols) under the edge mode (KF_VALID and mode 1: zero outside)
__device__ __forceinline__ kf_acc_t kf_at_col(const kf_x_t* __restrict__ col, long long i, int n, long long cols)
{
#if KF_VALID || KF_EDGE == 1
    return (i >= 0 && i < n) ? kf_ld(col + i * cols) : (kf_acc_t)0;
#else
    return kf_ld(col + ((i >= 0 && i < n) ? i : (long long)kf_edge((int)i, n)) * cols);
#endif
}

__device__ __forceinline__ void kf_stencil1d_cols(const kf_x_t* __restrict__ x, const kf_taps_t* __restrict__ taps,
                                                  kf_y_t* __restrict__ y, long long planes, int n, long long cols, int kk)
{
#if KF_TAPS_CONST
    const int k = KF_K;
    const kf_acc_t c[KF_K] = {KF_TAPS};
    (void)kk;
    (void)taps;
#else
    const int k = kk;
    __shared__ kf_acc_t tp[KF_CHUNK];
    const int tid = threadIdx.y * BX + threadIdx.x;
#endif
    const int off = KF_VALID ? 0 : k / 2;
    const int nout = KF_VALID ? n - k + 1 : n;
    const long long col = (long long)blockIdx.x * BX + threadIdx.x;
    const long long r0 = (long long)blockIdx.y * KF_TROWS;
    if (nout <= 0 || r0 >= nout) return;
    __shared__ kf_acc_t tile[KF_TROWS + KF_CHUNK - 1][BX];
    for (long long p = blockIdx.z; p < planes; p += gridDim.z) {
        const kf_x_t* __restrict__ xc = x + p * n * cols + (col < cols ? col : 0);
        kf_acc_t acc[RY];
#pragma unroll
        for (int q = 0; q < RY; ++q) acc[q] = (kf_acc_t)0;
        for (int c0 = 0; c0 < k; c0 += KF_CHUNK) {
            const int ck = min(KF_CHUNK, k - c0);
            const long long start = r0 - off + c0;
            kf_acc_t v[RY];
#pragma unroll
            for (int q = 0; q < RY; ++q) v[q] = kf_at_col(xc, start + threadIdx.y + q * BY, n, cols);
#if !KF_TAPS_CONST
            const kf_acc_t t = tid < ck ? kf_ld(taps + (KF_FLIP ? k - 1 - c0 - tid : c0 + tid)) : (kf_acc_t)0;
#endif
            __syncthreads();                 // the last chunk's (or plane's) sums are done with the tile
#pragma unroll
            for (int q = 0; q < RY; ++q) tile[threadIdx.y + q * BY][threadIdx.x] = v[q];
#pragma unroll 4
            for (int hr = threadIdx.y; hr < ck - 1; hr += BY)      // the halo's k - 1 rows, straight in
                tile[KF_TROWS + hr][threadIdx.x] = kf_at_col(xc, start + KF_TROWS + hr, n, cols);
#if !KF_TAPS_CONST
            if (tid < ck) tp[tid] = t;
#endif
            __syncthreads();
            const int o = threadIdx.y * RY;                 // a thread's RY outputs are consecutive rows
#if KF_TAPS_CONST
#pragma unroll
            for (int j = 0; j < KF_K; ++j) {
                const kf_acc_t tj = c[KF_FLIP ? KF_K - 1 - j : j];
#else
            for (int j = 0; j < ck; ++j) {                  // the taps outside: acc stays in registers
                const kf_acc_t tj = tp[j];
#endif
#pragma unroll
                for (int q = 0; q < RY; ++q) acc[q] = kf_fma(tj, tile[o + q + j][threadIdx.x], acc[q]);
            }
        }
        if (col < cols) {
            kf_y_t* __restrict__ yc = y + p * (long long)nout * cols + col;
#pragma unroll
            for (int q = 0; q < RY; ++q) {
                const long long i = r0 + threadIdx.y * RY + q;
                if (i >= nout) continue;
                const bool edge = KF_BORDER && (i < off || i >= n - (k - 1 - off));
                kf_st(yc + i * cols, edge ? kf_border_value(xc + i * cols) : acc[q]);
            }
        }
    }
}
