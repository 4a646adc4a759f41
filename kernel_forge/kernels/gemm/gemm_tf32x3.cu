// kforge: grid = [cdiv(@@N@@, BN), cdiv(@@M@@, BM), @@BATCH@@]
// kforge: block = [32 * (BM // WM) * (BN // WN), 1, 1]
// kforge: shared_mem = 4 * STAGES * (BM * BK + BK * BN + 4 * BM + 4 * BN + 16 * BK)
// kforge: tune BM = [128, 64, 256]
// kforge: tune BN = [128, 64, 256]
// kforge: tune BK = [16, 32]
// kforge: tune WM = [64, 32]
// kforge: tune WN = [32, 64]
// kforge: tune STAGES = [3, 2, 4]
// kforge: constraint BM % WM == 0 and BN % WN == 0
// kforge: constraint (BM // WM) * (BN // WN) >= 4 and (BM // WM) * (BN // WN) <= 16
// kforge: constraint (BM * BK) % (128 * (BM // WM) * (BN // WN)) == 0
// kforge: constraint (BK * BN) % (128 * (BM // WM) * (BN // WN)) == 0
// kforge: constraint 4 * STAGES * (BM * BK + BK * BN + 4 * BM + 4 * BN + 16 * BK) <= 232448
// kforge: constraint WM * WN <= 2048 and ((BM // WM) * (BN // WN) <= 8 or WM * WN <= 1024)
// Bound pattern gemm_tf32x3 (from gemm_tf32x3_mma): fp32 GEMM on the TF32 tensor cores with the
// three-product split (x = x_hi + x_lo, both TF32; a*b ~= a_lo*b_hi + a_hi*b_lo + a_hi*b_hi, three
// mma.sync.m16n8k8 products accumulated in fp32: fp32-level error), a STAGES-deep cp.async pipeline
// into padded shared tiles, and the epilogue C = alpha * acc (+ beta * C) (+ bias[col]).  A is m x k
// (or k x m when KF_TRANS_A), B is k x n (or n x k when KF_TRANS_B: a linear layer's weight); each
// operand's shared tile keeps the layout it has in memory (16-byte copies along its rows), padded
// so that a warp's fragment reads hit 32 distinct banks either way.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 32
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef GROUP
#define GROUP 8
#endif

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define THREADS (32 * WARPS_M * WARPS_N)
#define MI (WM / 16)
#define NI (WN / 8)
#if KF_TRANS_A
#define A_LD (BM + 8)                     // A tile stored [BK][BM + 8] (k-major, as in memory)
#define A_STAGE (BK * A_LD)
#define A_AT(r, kk) ((kk) * A_LD + (r))
#define A_ROWS BK
#define A_ROWLEN BM
#else
#define A_LD (BK + 4)                     // A tile stored [BM][BK + 4]
#define A_STAGE (BM * A_LD)
#define A_AT(r, kk) ((r) * A_LD + (kk))
#define A_ROWS BM
#define A_ROWLEN BK
#endif
#if KF_TRANS_B
#define B_LD (BK + 4)                     // B tile stored [BN][BK + 4] (n-major, as in memory)
#define B_STAGE (BN * B_LD)
#define B_AT(kk, col) ((col) * B_LD + (kk))
#define B_ROWS BN
#define B_ROWLEN BK
#else
#define B_LD (BN + 8)                     // B tile stored [BK][BN + 8]
#define B_STAGE (BK * B_LD)
#define B_AT(kk, col) ((kk) * B_LD + (col))
#define B_ROWS BK
#define B_ROWLEN BN
#endif
#define A_CHUNKS (A_ROWS * A_ROWLEN / 4 / THREADS)
#define B_CHUNKS (B_ROWS * B_ROWLEN / 4 / THREADS)

#if (WM % 16) || (WN % 8) || (BK % 8) || (BM % WM) || (BN % WN)
#error "WM must be a multiple of 16, WN of 8, BK of 8; BM and BN multiples of the warp tile"
#endif
#if (BM * BK / 4) % THREADS || (BK * BN / 4) % THREADS
#error "tile copies must divide evenly among the threads"
#endif

#define KF_THREADS THREADS, 1

// -- the TF32 pieces (kf_tf32, kf_mma_tf32, kf_split, kf_mma_tf32x3) and the cp.async wrappers
// (sm_80+), from the kernel library's headers kforge/tf32_mma.cuh and kforge/cp_async.cuh.  The
// tests' host emulation defines KF_EMULATED_PTX and supplies the PTX wrappers.
#include "kforge/tf32_mma.cuh"
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/block_order.cuh"

#include "kforge/gemm_epilogue.cuh"

// the copies of one operand's tile: ROWS x ROWLEN floats of a row-major matrix with `ld` floats per
// row and `nrows` rows, from (r0, c0), into dst with row stride LD; 16 bytes where aligned and inside
template <int ROWS, int ROWLEN, int LD, int CHUNKS>
__device__ __forceinline__ void kf_load(float* dst, const float* __restrict__ src, int nrows, int ld, int r0, int c0)
{
    const bool vec = (ld & 3) == 0;
#pragma unroll
    for (int i = 0; i < CHUNKS; ++i) {
        const int f = threadIdx.x + i * THREADS;
        const int row = f / (ROWLEN / 4);
        const int col = (f % (ROWLEN / 4)) * 4;
        const int gr = r0 + row, gc = c0 + col;
        float* d = dst + row * LD + col;
        const float* s = src + (size_t)gr * ld + gc;
        if (vec) {
            const bool in = gr < nrows && gc < ld;
            kf_cp_async16(d, in ? s : src, in ? 16 : 0);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const bool in = gr < nrows && gc + e < ld;
                kf_cp_async4(d + e, in ? s + e : src, in ? 4 : 0);
            }
        }
    }
}

__device__ __forceinline__ void kf_gemm(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                        int m, int n, int k, float alpha, float beta, const float* __restrict__ bias)
{
    extern __shared__ float4 kf_smem4[];
    float* const As = reinterpret_cast<float*>(kf_smem4);   // [STAGES][A_STAGE]
    float* const Bs = As + STAGES * A_STAGE;                  // [STAGES][B_STAGE]

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;

    // block order: GROUP block-rows at a time, walked column by column (L2 reuse of both panels)
    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;

    auto load_tile = [&](int tile, int s) {
        const int k0 = tile * BK;
#if KF_TRANS_A
        kf_load<BK, BM, A_LD, A_CHUNKS>(As + s * A_STAGE, a, k, m, k0, bm);
#else
        kf_load<BM, BK, A_LD, A_CHUNKS>(As + s * A_STAGE, a, m, k, bm, k0);
#endif
#if KF_TRANS_B
        kf_load<BN, BK, B_LD, B_CHUNKS>(Bs + s * B_STAGE, b, n, k, bn, k0);
#else
        kf_load<BK, BN, B_LD, B_CHUNKS>(Bs + s * B_STAGE, b, k, n, k0, bn);
#endif
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NI; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                acc[i][j][r] = 0.0f;
            }
        }
    }

    const int ntiles = (k + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ntiles) {
            load_tile(s, s);
        }
        kf_cp_async_commit();
    }

    const int wrow = (warp / WARPS_N) * WM;
    const int wcol = (warp % WARPS_N) * WN;

#pragma unroll 1
    for (int tile = 0; tile < ntiles; ++tile) {
        kf_cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = tile + STAGES - 1;
        if (next < ntiles) {
            load_tile(next, next % STAGES);
        }
        kf_cp_async_commit();

        const float* as = As + (tile % STAGES) * A_STAGE;
        const float* bs = Bs + (tile % STAGES) * B_STAGE;
        // one 8-deep slice at a time: unrolled, the slices' fresh accumulators (kf_mma_tf32x3) spill
#pragma unroll 1
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned ahi[MI][4], alo[MI][4];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int r = wrow + i * 16 + g;
                kf_split(as[A_AT(r, kk + t)], ahi[i][0], alo[i][0]);              // A[g][t]
                kf_split(as[A_AT(r + 8, kk + t)], ahi[i][1], alo[i][1]);          // A[g+8][t]
                kf_split(as[A_AT(r, kk + t + 4)], ahi[i][2], alo[i][2]);          // A[g][t+4]
                kf_split(as[A_AT(r + 8, kk + t + 4)], ahi[i][3], alo[i][3]);      // A[g+8][t+4]
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = wcol + j * 8 + g;
                unsigned bhi[2], blo[2];
                kf_split(bs[B_AT(kk + t, col)], bhi[0], blo[0]);                  // B[t][g]
                kf_split(bs[B_AT(kk + t + 4, col)], bhi[1], blo[1]);              // B[t+4][g]
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    kf_mma_tf32x3(acc[i][j], ahi[i], alo[i], bhi, blo);
                }
            }
        }
    }

    const int row0 = bm + wrow + g;
    const int col0 = bn + wcol + 2 * t;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + i * 16 + h * 8;
            if (row >= m) {
                continue;
            }
            float* crow = c + (size_t)row * n;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = col0 + j * 8;
                if (col < n) crow[col] = kf_epi_value(acc[i][j][2 * h], crow, col, alpha, beta, bias);
                if (col + 1 < n) crow[col + 1] = kf_epi_value(acc[i][j][2 * h + 1], crow, col + 1, alpha, beta, bias);
            }
        }
    }
}
