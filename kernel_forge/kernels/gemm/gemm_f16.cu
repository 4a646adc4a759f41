// kforge: grid = [cdiv(@@N@@, BN), cdiv(@@M@@, BM), @@BATCH@@]
// kforge: block = [32 * (BM // WM) * (BN // WN), 1, 1]
// kforge: shared_mem = 2 * STAGES * (BM * BK + BK * BN)
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
// Bound pattern gemm_f16 (from gemm_f16_mma): a GEMM of 16-bit operands (fp16 or bf16, both the
// same) on the tensor cores, mma.sync.m16n8k16 with fp32 accumulators, and the epilogue
// C = alpha * acc (+ beta * C) (+ bias[col]) stored as C's own type (fp32, fp16 or bf16), rounded
// once.  A is m x k (or k x m when KF_TRANS_A), B is k x n (or n x k when KF_TRANS_B: a linear
// layer's weight).  Each operand's shared tile keeps the layout it has in memory (16-byte cp.async
// copies along its rows, XOR-swizzled chunks); ldmatrix reads the fragments from either layout, in
// its plain or transposed form.  A STAGES-deep pipeline, grouped block order for L2 reuse, any m,
// n, k: a chunk is copied by cp.async where its row length is a multiple of 8 and the matrix is
// 16-byte aligned (then it lies wholly inside or outside, and outside is zero-filled), else it is
// gathered value by value.
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
#define NI (WN / 8)                       // mma tiles along n per warp (even: one ldmatrix.x4 loads two)
#if KF_TRANS_A
#define A_ROWS BK                         // A tile stored [BK][BM] (k-major, as in memory)
#define A_ROWLEN BM
#else
#define A_ROWS BM                         // A tile stored [BM][BK]
#define A_ROWLEN BK
#endif
#if KF_TRANS_B
#define B_ROWS BN                         // B tile stored [BN][BK] (n-major, as in memory)
#define B_ROWLEN BK
#else
#define B_ROWS BK                         // B tile stored [BK][BN]
#define B_ROWLEN BN
#endif
#define A_STAGE (BM * BK)
#define B_STAGE (BK * BN)

#if (WM % 16) || (WN % 16) || (BK % 32) || (BN % 64) || (BM % 64) || (BM % WM) || (BN % WN)
#error "WM, WN multiples of 16; BK of 32; BM, BN of 64 and of the warp tile"
#endif
#if (BM * BK / 8) % THREADS || (BK * BN / 8) % THREADS
#error "tile copies must divide evenly among the threads"
#endif
#if STAGES < 2
#error "STAGES >= 2"
#endif

#define KF_THREADS THREADS, 1

// -- the mma.sync and ldmatrix wrappers, the chunk swizzle and the gather (kforge/f16_mma.cuh), the
// cp.async wrappers (kforge/cp_async.cuh), sm_80+.  The tests' host emulation defines
// KF_EMULATED_PTX and supplies the PTX wrappers.
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/f16_mma.cuh"
#include "kforge/block_order.cuh"

#if KF_AB_BF16
#define KF_MMA kf_mma_bf16
#else
#define KF_MMA kf_mma_f16
#endif

// the copies of one operand's tile: ROWS x ROWLEN values of a row-major matrix of nrows x ncols
// values, from (r0, c0), into the swizzled tile dst (rows of ROWLEN values, no padding)
template <int ROWS, int ROWLEN, typename T>
__device__ __forceinline__ void kf_load(T* dst, const T* __restrict__ src, int nrows, int ncols, int r0, int c0)
{
    constexpr int CPR = ROWLEN / 8;
    const bool vec = (ncols & 7) == 0 && (reinterpret_cast<unsigned long long>(src) & 15) == 0;
#pragma unroll
    for (int i = 0; i < ROWS * CPR / THREADS; ++i) {
        const int f = threadIdx.x + i * THREADS;
        const int row = f / CPR, ch = f % CPR;
        kf_copy8(dst + row * ROWLEN + kf_swz<CPR>(row, ch) * 8, src, nrows, ncols, r0 + row, c0 + ch * 8, vec);
    }
}

// C = alpha * acc (+ beta * C) (+ bias[col]): kf_epi
#include "kforge/gemm_epilogue.cuh"

__device__ __forceinline__ void kf_gemm(const kf_a_t* __restrict__ a, const kf_b_t* __restrict__ b,
                                        kf_c_t* __restrict__ c, int m, int n, int k, float alpha, float beta,
                                        const kf_bias_t* __restrict__ bias)
{
    extern __shared__ uint4 kf_smem16[];
    kf_a_t* const As = reinterpret_cast<kf_a_t*>(kf_smem16);                 // [STAGES][A_STAGE]
    kf_b_t* const Bs = reinterpret_cast<kf_b_t*>(As + STAGES * A_STAGE);     // [STAGES][B_STAGE]

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;

    // block order: GROUP block-rows at a time, walked column by column (L2 reuse of both panels)
    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;

    auto load_tile = [&](int tile, int s) {
        const int k0 = tile * BK;
#if KF_TRANS_A
        kf_load<BK, BM>(As + s * A_STAGE, a, k, m, k0, bm);
#else
        kf_load<BM, BK>(As + s * A_STAGE, a, m, k, bm, k0);
#endif
#if KF_TRANS_B
        kf_load<BN, BK>(Bs + s * B_STAGE, b, n, k, bn, k0);
#else
        kf_load<BK, BN>(Bs + s * B_STAGE, b, k, n, k0, bn);
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
    // the row and chunk this lane addresses for ldmatrix: matrix q = lane / 8 of an x4, its row lane % 8
    const int l8 = lane & 7, lq = lane >> 3;

#pragma unroll 1
    for (int tile = 0; tile < ntiles; ++tile) {
        kf_cp_async_wait<STAGES - 2>();        // slice `tile` has landed (this thread's copies) ...
        __syncthreads();                       // ... and everyone's; stage (tile - 1) % STAGES is free
        const int next = tile + STAGES - 1;
        if (next < ntiles) {
            load_tile(next, next % STAGES);
        }
        kf_cp_async_commit();

        const kf_a_t* as = As + (tile % STAGES) * A_STAGE;
        const kf_b_t* bs = Bs + (tile % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[MI][4], bf[NI][2];
            // A fragments of 16 x 16: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
#pragma unroll
            for (int i = 0; i < MI; ++i) {
#if KF_TRANS_A
                const int r = kk + l8 + 8 * (lq >> 1);                     // a k row of the [BK][BM] tile
                const int ch = (wrow + i * 16) / 8 + (lq & 1);
                kf_ldmatrix_x4_trans(af[i], as + r * BM + kf_swz<BM / 8>(r, ch) * 8);
#else
                const int r = wrow + i * 16 + l8 + 8 * (lq & 1);           // an m row of the [BM][BK] tile
                const int ch = kk / 8 + (lq >> 1);
                kf_ldmatrix_x4(af[i], as + r * BK + kf_swz<BK / 8>(r, ch) * 8);
#endif
            }
            // B fragments of two 16 x 8 tiles: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                unsigned q[4];
#if KF_TRANS_B
                const int r = wcol + j * 8 + l8 + 8 * (lq >> 1);           // an n row of the [BN][BK] tile
                const int ch = kk / 8 + (lq & 1);
                kf_ldmatrix_x4(q, bs + r * BK + kf_swz<BK / 8>(r, ch) * 8);
#else
                const int r = kk + l8 + 8 * (lq & 1);                      // a k row of the [BK][BN] tile
                const int ch = (wcol + j * 8) / 8 + (lq >> 1);
                kf_ldmatrix_x4_trans(q, bs + r * BN + kf_swz<BN / 8>(r, ch) * 8);
#endif
                bf[j][0] = q[0];
                bf[j][1] = q[1];
                bf[j + 1][0] = q[2];
                bf[j + 1][1] = q[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i) {
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    KF_MMA(acc[i][j], af[i], bf[j]);
                }
            }
        }
    }

    // epilogue: acc[i][j][r] is C[row0 + i*16 + 8*(r/2)][col0 + j*8 + (r%2)]
    const int row0 = bm + wrow + (lane >> 2);
    const int col0 = bn + wcol + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + i * 16 + h * 8;
            if (row >= m) {
                continue;
            }
            kf_c_t* crow = c + (size_t)row * n;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = col0 + j * 8;
                if (col < n) kf_epi(acc[i][j][2 * h], crow, col, alpha, beta, bias);
                if (col + 1 < n) kf_epi(acc[i][j][2 * h + 1], crow, col + 1, alpha, beta, bias);
            }
        }
    }
}
