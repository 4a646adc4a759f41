// matmul_f16 -- expert pattern gemm_f16_mma: half-precision GEMM on the tensor cores, fp16 A and B,
// fp32 accumulation, fp16 C (rounded once, to nearest).
// Tiling: a block computes a BM x BN tile of C; its WARPS_M x WARPS_N warps each own a WM x WN warp
// tile made of (WM/16) x (WN/8) tiles of mma.sync.m16n8k16 (fp16 x fp16 -> fp32), 4 fp32
// accumulators per lane per tile.
// Fragments come from shared memory by ldmatrix: one ldmatrix.x4 gives a warp the A fragment of a
// 16 x 16 tile (lanes 0-15 address rows 0-15 at k 0-7, lanes 16-31 the same rows at k 8-15); one
// ldmatrix.x4.trans gives the B fragments of two 8-column tiles from a row-major (k-major) B tile
// (lanes 0-15 address k rows 0-15 of columns n0..n0+7, lanes 16-31 those of n0+8..n0+15).
// Pipeline: STAGES shared stages of A (BM x BK) and B (BK x BN), filled by cp.async 16-byte copies
// STAGES-1 k-slices ahead of the math; one cp.async.wait_group + one __syncthreads per slice.
// Swizzle: shared rows are stored unpadded in 16-byte chunks, chunk c of row r at c ^ (r % 8) (rows
// of 8 or more chunks) or c ^ ((r / 2) % 4) (rows of 4 chunks, BK = 32): the 8 rows one ldmatrix
// phase reads land in 8 different 16-byte bank groups, and cp.async writes whole chunks.
// Block order: groups of GROUP (8) block-rows walked column by column, for L2 reuse.
// Edges: any m, n, k.  A chunk of 8 halves is copied by cp.async where it is 16-byte aligned (A:
// k % 8 == 0, B: n % 8 == 0) -- then it lies wholly inside or outside the matrix, and outside is
// zero-filled -- else it is gathered half by half (zeros outside) and stored to shared memory
// directly.  Stores of C are checked.  Deterministic: a fixed order of products per output.
// kforge: grid = [cdiv(n, BN), cdiv(m, BM), 1]
// kforge: block = [32 * (BM // WM) * (BN // WN), 1, 1]
// kforge: shared_mem = 2 * STAGES * (BM * BK + BK * BN)
// (registers: a 64 x 64 warp tile holds 128 accumulators, 16 A and 16 B fragment registers, about
// 250 in all; with 16 copies of a 64 x 256 B slice per thread besides, it spills)
// kforge: tune BM = [128, 64, 256]
// kforge: tune BN = [128, 256, 64]
// kforge: tune BK = [32, 64]
// kforge: tune WM = [64, 32]
// kforge: tune WN = [64, 32]
// kforge: tune STAGES = [4, 3, 2]
// kforge: constraint BM % WM == 0 and BN % WN == 0
// kforge: constraint (BM // WM) * (BN // WN) >= 4 and (BM // WM) * (BN // WN) <= 8
// kforge: constraint (BM * BK) % (256 * (BM // WM) * (BN // WN)) == 0
// kforge: constraint (BK * BN) % (256 * (BM // WM) * (BN // WN)) == 0
// kforge: constraint 2 * STAGES * (BM * BK + BK * BN) <= 232448
// kforge: constraint WM * WN < 4096 or BK * BN <= 8192

#include <cuda_fp16.h>

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 64
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP
#define GROUP 8
#endif

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define THREADS (32 * WARPS_M * WARPS_N)
#define MI (WM / 16)                      // mma tiles along m per warp
#define NI (WN / 8)                       // mma tiles along n per warp (even: ldmatrix.x4.trans loads two)
#define A_CPR (BK / 8)                    // 16-byte chunks per row of the A tile
#define B_CPR (BN / 8)                    // 16-byte chunks per row of the B tile
#define A_STAGE (BM * BK)                 // halves per A stage
#define B_STAGE (BK * BN)                 // halves per B stage
#define A_CHUNKS (BM * A_CPR / THREADS)   // 16-byte chunks of the A tile per thread
#define B_CHUNKS (BK * B_CPR / THREADS)   // 16-byte chunks of the B tile per thread

#if (WM % 16) || (WN % 16) || (BK % 32) || (BN % 64) || (BM % WM) || (BN % WN)
#error "WM, WN multiples of 16; BK of 32; BN of 64; BM and BN multiples of the warp tile"
#endif
#if (BM * A_CPR) % THREADS || (BK * B_CPR) % THREADS
#error "tile copies must divide evenly among the threads"
#endif
#if STAGES < 2
#error "STAGES >= 2"
#endif

// -- the mma.sync and ldmatrix wrappers (sm_80+), the chunk swizzle, copy and fp16 pair store, from the
// kernel library's header kforge/f16_mma.cuh; the cp.async wrappers from kforge/cp_async.cuh.  The
// tests' host emulation defines KF_EMULATED_PTX and supplies the PTX wrappers.
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/f16_mma.cuh"
#include "kforge/block_order.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
matmul_f16(const __half* __restrict__ a, const __half* __restrict__ b, __half* __restrict__ c,
           int m, int n, int k)
{
    extern __shared__ uint4 kf_smem16[];
    __half* const As = reinterpret_cast<__half*>(kf_smem16);   // [STAGES][BM][BK], swizzled chunks
    __half* const Bs = As + STAGES * A_STAGE;                     // [STAGES][BK][BN], swizzled chunks

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;

    // block order: GROUP block-rows at a time, walked column by column (L2 reuse of both panels)
    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;

    const bool a_vec = (k & 7) == 0;
    const bool b_vec = (n & 7) == 0;

    // issue the copies of k-slice `tile` into stage `s` (every thread, then one commit by the caller)
    auto load_tile = [&](int tile, int s) {
        const int k0 = tile * BK;
        __half* as = As + s * A_STAGE;
        __half* bs = Bs + s * B_STAGE;
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const int f = tid + i * THREADS;
            const int row = f / A_CPR, ch = f % A_CPR;
            kf_copy8(as + row * BK + kf_swz<A_CPR>(row, ch) * 8, a, m, k, bm + row, k0 + ch * 8, a_vec);
        }
#pragma unroll
        for (int i = 0; i < B_CHUNKS; ++i) {
            const int f = tid + i * THREADS;
            const int row = f / B_CPR, ch = f % B_CPR;
            kf_copy8(bs + row * BN + kf_swz<B_CPR>(row, ch) * 8, b, k, n, k0 + row, bn + ch * 8, b_vec);
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
    const int lrow = lane & 15;                // the row (A) or k row (B) this lane addresses for ldmatrix
    const int lhalf = lane >> 4;               // which 8-column half: A's k 8-15, B's second n-tile

#pragma unroll 1
    for (int tile = 0; tile < ntiles; ++tile) {
        kf_cp_async_wait<STAGES - 2>();        // slice `tile` has landed (this thread's copies) ...
        __syncthreads();                       // ... and everyone's; stage (tile - 1) % STAGES is free
        const int next = tile + STAGES - 1;
        if (next < ntiles) {
            load_tile(next, next % STAGES);
        }
        kf_cp_async_commit();

        const __half* as = As + (tile % STAGES) * A_STAGE;
        const __half* bs = Bs + (tile % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int r = wrow + i * 16 + lrow;
                kf_ldmatrix_x4(af[i], as + r * BK + kf_swz<A_CPR>(r, kk / 8 + lhalf) * 8);
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                const int r = kk + lrow;
                unsigned q[4];
                kf_ldmatrix_x4_trans(q, bs + r * BN + kf_swz<B_CPR>(r, (wcol + j * 8) / 8 + lhalf) * 8);
                bf[j][0] = q[0];
                bf[j][1] = q[1];
                bf[j + 1][0] = q[2];
                bf[j + 1][1] = q[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i) {
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    kf_mma_f16(acc[i][j], af[i], bf[j]);
                }
            }
        }
    }

    // epilogue: acc[i][j][r] is C[row0 + i*16 + 8*(r/2)][col0 + j*8 + (r%2)], rounded to fp16
    const int row0 = bm + wrow + (lane >> 2);
    const int col0 = bn + wcol + 2 * (lane & 3);
    const bool pair = (n & 1) == 0;            // 4-byte stores where every row starts 4-byte aligned
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + i * 16 + h * 8;
            if (row >= m) {
                continue;
            }
            __half* crow = c + (size_t)row * n;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = col0 + j * 8;
                const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                kf_store2_f16(crow, col, n, v0, v1, pair);
            }
        }
    }
}
