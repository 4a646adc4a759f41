// matmul_f32 -- expert pattern gemm_tf32x3_mma: fp32 GEMM on the TF32 tensor cores with the
// three-product split ("3xTF32"), so the result keeps fp32-level error.
// Why the split: one TF32 product rounds each operand to a 10-bit mantissa (relative error 2^-11),
// which at k = 4096 is about 0.03 of absolute error, twice the task's tolerance.  Each operand x is
// split into x_hi = tf32(x) and x_lo = tf32(x - x_hi); x_hi + x_lo holds 21 bits of x, and
//     a * b ~= a_hi*b_hi + a_hi*b_lo + a_lo*b_hi       (a_lo*b_lo, ~2^-22 relative, is dropped)
// is three mma.sync.m16n8k8 TF32 products accumulated in fp32: about as accurate as FFMA, at up to
// a third of the TF32 tensor-core rate (still well above the fp32 FMA peak).
// Tiling: a block computes a BM x BN tile of C; its WARPS_M x WARPS_N warps each own a WM x WN warp
// tile made of (WM/16) x (WN/8) mma tiles of 16 x 8, each accumulating 4 fp32 registers per lane.
// Pipeline: STAGES shared stages of A (BM x BK, k contiguous) and B (BK x BN, n contiguous) are
// filled by cp.async (16-byte copies, zero-filled outside the matrices) STAGES-1 tiles ahead of the
// math; one cp.async.wait_group + one __syncthreads per BK-slice.
// Bank conflicts: the A tile's rows are padded by 4 floats (row stride BK+4) and the B tile's by 8
// (BN+8), so a warp's fragment reads -- A: 8 rows x 4 columns, B: 4 rows x 8 columns -- fall into
// 32 distinct banks.
// Block order: blocks walk C in groups of GROUP (8) block-rows, column by column, so the A and B
// panels that one wave of blocks reads stay in L2.
// Edges: any m, n, k; a 16-byte copy where the 4 floats lie inside the matrix and are 16-byte
// aligned (A: k % 4 == 0, B: n % 4 == 0), else four 4-byte copies, each zero-filled outside.
// Stores are checked.  Deterministic: a fixed order of products per output.
// kforge: grid = [cdiv(n, BN), cdiv(m, BM), 1]
// kforge: block = [32 * (BM // WM) * (BN // WN), 1, 1]
// kforge: shared_mem = 4 * STAGES * (BM * (BK + 4) + BK * (BN + 8))
// (registers: a 64 x 32 warp tile holds 64 accumulators and 32 split A fragments, 160-230 registers
// in all: 64 x 64 spills, and 16 warps (at most 128 registers each) only fit a 32 x 32 tile)
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
// kforge: constraint 4 * STAGES * (BM * (BK + 4) + BK * (BN + 8)) <= 232448
// kforge: constraint WM * WN <= 2048 and ((BM // WM) * (BN // WN) <= 8 or WM * WN <= 1024)

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
#define MI (WM / 16)                      // mma tiles along m per warp
#define NI (WN / 8)                       // mma tiles along n per warp
#define AS (BK + 4)                       // A tile row stride (floats): conflict-free fragment reads
#define BS (BN + 8)                       // B tile row stride (floats)
#define A_STAGE (BM * AS)                 // floats per A stage
#define B_STAGE (BK * BS)                 // floats per B stage
#define A_CHUNKS (BM * BK / 4 / THREADS)  // 16-byte chunks of the A tile per thread
#define B_CHUNKS (BK * BN / 4 / THREADS)  // 16-byte chunks of the B tile per thread

#if (WM % 16) || (WN % 8) || (BK % 8) || (BM % WM) || (BN % WN)
#error "WM must be a multiple of 16, WN of 8, BK of 8; BM and BN multiples of the warp tile"
#endif
#if (BM * BK / 4) % THREADS || (BK * BN / 4) % THREADS
#error "tile copies must divide evenly among the threads"
#endif
#if STAGES < 2
#error "STAGES >= 2"
#endif

// -- the TF32 pieces (kf_tf32, kf_mma_tf32, kf_split, kf_mma_tf32x3) and the cp.async wrappers
// (sm_80+), from the kernel library's headers kforge/tf32_mma.cuh and kforge/cp_async.cuh.  The
// tests' host emulation defines KF_EMULATED_PTX and supplies the PTX wrappers.
#include "kforge/tf32_mma.cuh"
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/block_order.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
           int m, int n, int k)
{
    extern __shared__ float4 kf_smem4[];
    float* const As = reinterpret_cast<float*>(kf_smem4);   // [STAGES][BM][AS]
    float* const Bs = As + STAGES * A_STAGE;                  // [STAGES][BK][BS]

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int g = lane >> 2;                  // mma "groupID"
    const int t = lane & 3;                   // mma "threadID_in_group"

    // block order: GROUP block-rows at a time, walked column by column (L2 reuse of both panels)
    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;

    const bool a_vec = (k & 3) == 0;
    const bool b_vec = (n & 3) == 0;

    // issue the copies of k-slice `tile` into stage `s` (every thread, then one commit by the caller)
    auto load_tile = [&](int tile, int s) {
        const int k0 = tile * BK;
        float* as = As + s * A_STAGE;
        float* bs = Bs + s * B_STAGE;
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const int f = tid + i * THREADS;
            const int row = f / (BK / 4);
            const int col = (f % (BK / 4)) * 4;
            const int gr = bm + row, gc = k0 + col;
            float* dst = as + row * AS + col;
            const float* src = a + (size_t)gr * k + gc;
            if (a_vec) {
                kf_cp_async16(dst, gr < m && gc < k ? src : a, gr < m && gc < k ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool in = gr < m && gc + e < k;
                    kf_cp_async4(dst + e, in ? src + e : a, in ? 4 : 0);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) {
            const int f = tid + i * THREADS;
            const int row = f / (BN / 4);
            const int col = (f % (BN / 4)) * 4;
            const int gr = k0 + row, gc = bn + col;
            float* dst = bs + row * BS + col;
            const float* src = b + (size_t)gr * n + gc;
            if (b_vec) {
                kf_cp_async16(dst, gr < k && gc < n ? src : b, gr < k && gc < n ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool in = gr < k && gc + e < n;
                    kf_cp_async4(dst + e, in ? src + e : b, in ? 4 : 0);
                }
            }
        }
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
    // prologue: STAGES - 1 slices in flight (a group is committed even when empty, so that
    // wait_group counts the same in every iteration)
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ntiles) {
            load_tile(s, s);
        }
        kf_cp_async_commit();
    }

    const int wrow = (warp / WARPS_N) * WM;    // this warp's tile inside the block tile
    const int wcol = (warp % WARPS_N) * WN;

#pragma unroll 1
    for (int tile = 0; tile < ntiles; ++tile) {
        kf_cp_async_wait<STAGES - 2>();        // slice `tile` has landed (this thread's copies) ...
        __syncthreads();                       // ... and everyone's; stage (tile - 1) % STAGES is free
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
                const float* p = as + (wrow + i * 16 + g) * AS + kk + t;
                kf_split(p[0], ahi[i][0], alo[i][0]);              // A[g][t]
                kf_split(p[8 * AS], ahi[i][1], alo[i][1]);         // A[g+8][t]
                kf_split(p[4], ahi[i][2], alo[i][2]);              // A[g][t+4]
                kf_split(p[8 * AS + 4], ahi[i][3], alo[i][3]);     // A[g+8][t+4]
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const float* p = bs + (kk + t) * BS + wcol + j * 8 + g;
                unsigned bhi[2], blo[2];
                kf_split(p[0], bhi[0], blo[0]);                    // B[t][g]
                kf_split(p[4 * BS], bhi[1], blo[1]);               // B[t+4][g]
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    kf_mma_tf32x3(acc[i][j], ahi[i], alo[i], bhi, blo);
                }
            }
        }
    }

    // epilogue: acc[i][j][r] is C[row0 + i*16 + g + 8*(r/2)][col0 + j*8 + 2t + (r%2)]
    const int row0 = bm + wrow + g;
    const int col0 = bn + wcol + 2 * t;
    const bool pair = (n & 1) == 0;            // 8-byte stores where every row starts 8-byte aligned
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
                const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (pair && col + 1 < n) {
                    *reinterpret_cast<float2*>(crow + col) = make_float2(v0, v1);
                } else {
                    if (col < n) crow[col] = v0;
                    if (col + 1 < n) crow[col + 1] = v1;
                }
            }
        }
    }
}
