// kforge: grid = [max(1, cdiv(@@OUT_COLS@@, BLOCK * VPT)), min(@@ROWS@@, 65535), 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 64]
// kforge: tune VPT = [4, 2, 8, 1]
// kforge: constraint BLOCK >= 64
// Bound pattern stencil1d: a 1-D convolution or stencil along each row (PMPP's 1-D convolution, a
// signal filtered by a mask): y[r, i] = sum_j t[j] * x[r, i - KF_OFF + j], the taps a buffer of k
// values (k a parameter) or KF_K constants; KF_FLIP reads them reversed (a true convolution);
// edges and borders as stencil2d's (kforge/edge_index.cuh), or "valid" (KF_VALID: i + j, no edge, n - k + 1
// outputs).  Block (t, r) owns BLOCK * VPT outputs of row r (rows beyond the grid's 65,535 loop):
// its BLOCK * VPT + k - 1 inputs go to shared memory in coalesced loads, all issued before the
// first is used, then each thread sums its VPT outputs from shared memory (a warp's reads
// consecutive: no bank conflict; a tap the same for the warp: a broadcast).  DRAM sees x once and
// y once.  A mask longer than KF_CHUNK taps is applied KF_CHUNK taps at a time, the sums in registers.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VPT
#define VPT 4
#endif
#define KF_THREADS BLOCK
#define KF_CHUNK 64            // taps staged at a time (a longer mask: in chunks; at most BLOCK)
#define KF_TILE (BLOCK * VPT)

#include "kforge/edge_index.cuh"

// x at position i of a row of n under the edge mode (KF_VALID and mode 1: zero outside)
__device__ __forceinline__ kf_acc_t kf_at(const kf_x_t* __restrict__ row, long long i, int n)
{
#if KF_VALID || KF_EDGE == 1
    return (i >= 0 && i < n) ? kf_ld(row + i) : (kf_acc_t)0;
#else
    return kf_ld(row + ((i >= 0 && i < n) ? (int)i : kf_edge((int)i, n)));
#endif
}

__device__ __forceinline__ void kf_stencil1d(const kf_x_t* __restrict__ x, const kf_taps_t* __restrict__ taps,
                                             kf_y_t* __restrict__ y, long long rows, int n, int kk)
{
#if KF_TAPS_CONST
    const int k = KF_K;
    const kf_acc_t c[KF_K] = {KF_TAPS};
    (void)kk;
    (void)taps;
#else
    const int k = kk;
#endif
    const int off = KF_VALID ? 0 : k / 2;
    const int nout = KF_VALID ? n - k + 1 : n;
    const long long o0 = (long long)blockIdx.x * KF_TILE;
    if (nout <= 0 || o0 >= nout) return;
    __shared__ kf_acc_t tile[KF_TILE + KF_CHUNK - 1];
#if !KF_TAPS_CONST
    __shared__ kf_acc_t tp[KF_CHUNK];
#endif
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const kf_x_t* row = x + r * n;
        kf_acc_t acc[VPT];
#pragma unroll
        for (int q = 0; q < VPT; ++q) acc[q] = (kf_acc_t)0;
        for (int c0 = 0; c0 < k; c0 += KF_CHUNK) {      // one chunk unless the mask is longer
            const int ck = min(KF_CHUNK, k - c0);
            const long long start = o0 - off + c0;
            kf_acc_t v[VPT];
#pragma unroll
            for (int q = 0; q < VPT; ++q) v[q] = kf_at(row, start + threadIdx.x + (long long)q * BLOCK, n);
            const kf_acc_t halo = threadIdx.x < ck - 1 ? kf_at(row, start + KF_TILE + threadIdx.x, n) : (kf_acc_t)0;
#if !KF_TAPS_CONST
            const kf_acc_t t = threadIdx.x < ck ? kf_ld(taps + (KF_FLIP ? k - 1 - c0 - threadIdx.x : c0 + threadIdx.x)) : (kf_acc_t)0;
#endif
            __syncthreads();                 // the last chunk's (or row's) sums are done with the tile
#pragma unroll
            for (int q = 0; q < VPT; ++q) tile[threadIdx.x + q * BLOCK] = v[q];
            if (threadIdx.x < ck - 1) tile[KF_TILE + threadIdx.x] = halo;
#if !KF_TAPS_CONST
            if (threadIdx.x < ck) tp[threadIdx.x] = t;
#endif
            __syncthreads();
#if KF_TAPS_CONST
#pragma unroll
            for (int j = 0; j < KF_K; ++j) {
                const kf_acc_t tj = c[KF_FLIP ? KF_K - 1 - j : j];
#else
            for (int j = 0; j < ck; ++j) {                  // the taps outside: acc stays in registers
                const kf_acc_t tj = tp[j];
#endif
#pragma unroll
                for (int q = 0; q < VPT; ++q) acc[q] = kf_fma(tj, tile[threadIdx.x + q * BLOCK + j], acc[q]);
            }
        }
        kf_y_t* out = y + r * nout;
#pragma unroll
        for (int q = 0; q < VPT; ++q) {
            const long long i = o0 + threadIdx.x + (long long)q * BLOCK;
            if (i >= nout) continue;
            const bool edge = KF_BORDER && (i < off || i >= n - (k - 1 - off));
            kf_st(out + i, edge ? kf_border_value(row + i) : acc[q]);
        }
    }
}
