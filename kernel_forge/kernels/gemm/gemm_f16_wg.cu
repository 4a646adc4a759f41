// kforge: grid = [cdiv(@@N@@, BN), cdiv(@@M@@, 64 * MT * WGS), @@BATCH@@]
// kforge: block = [128 * WGS, 1, 1]
// kforge: shared_mem = 2 * STAGES * (64 * MT * WGS * 64 + 64 * BN) + 1024
// kforge: tune BN = [256, 128, 64]
// kforge: tune WGS = [2, 1, 4]
// kforge: tune MT = [1, 2]
// kforge: tune STAGES = [4, 3, 5, 6, 2]
// kforge: tune INFLIGHT = [1, 0]
// kforge: constraint MT * BN <= 256 and BN <= 128 * WGS
// kforge: constraint WGS * (MT * BN // 2 + 40) <= 512
// kforge: constraint STAGES >= 2 + INFLIGHT
// kforge: constraint 2 * STAGES * (64 * MT * WGS * 64 + 64 * BN) + 1024 <= 232448
// kforge: constraint (8 * BN) % (128 * WGS) == 0
// Bound pattern gemm_f16_wg (from gemm_f16_wgmma; Hopper only, sm_90a): a GEMM of 16-bit operands
// (fp16 or bf16, both the same) on the warpgroup tensor-core instruction wgmma.mma_async with fp32
// accumulators, and gemm_f16's epilogue C = alpha * acc (+ beta * C) (+ bias[col]) stored as C's own
// type.  A is m x k (or k x m when KF_TRANS_A), B is k x n (or n x k when KF_TRANS_B: a linear
// layer's weight).  Each operand's stage keeps the layout it has in memory, in the 128-byte swizzle:
// an operand whose rows run along k is K-major (rows of 64 k values), one whose rows run along M or
// N is MN-major (blocks of 64 columns, each its 64 k rows), and the instruction is told which
// (imm-trans-a, imm-trans-b).  The pipeline, tiles and edges are gemm_f16_wgmma's: WGS warpgroups
// of MT 64-row tiles, STAGES cp.async stages, INFLIGHT batches across each barrier, any m, n, k.
// Compiled for another arch than sm_90a, it stops at the #error below; the tuner drops it on such a
// GPU before gating it.
#ifndef BN
#define BN 256
#endif
#ifndef WGS
#define WGS 2
#endif
#ifndef MT
#define MT 1
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef INFLIGHT
#define INFLIGHT 1
#endif
#ifndef GROUP
#define GROUP 8
#endif

#define BK 64                              // one 128-byte swizzle row of 16-bit values
#define BM (64 * MT * WGS)
#define THREADS (128 * WGS)
#define A_STAGE (BM * BK * 2)              // bytes per A stage
#define B_STAGE (BK * BN * 2)              // bytes per B stage
#define ACC (BN / 2)                       // fp32 accumulators per thread per 64-row tile
#define KF_THREADS THREADS, 1

#if (BN != 64 && BN != 128 && BN != 256) || MT < 1 || WGS < 1
#error "BN one of 64, 128, 256; MT and WGS at least 1"
#endif
#if (BK * (BN / 8)) % THREADS
#error "the B tile's copies must divide evenly among the threads"
#endif
#if STAGES < 2 + INFLIGHT
#error "STAGES >= 2 + INFLIGHT"
#endif
#if !defined(KF_EMULATED_PTX) && defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_f16_wg needs sm_90a (wgmma.mma_async): compile it for a compute capability 9.0 GPU"
#endif

// -- the cp.async wrappers (kforge/cp_async.cuh), the chunk copy (kforge/f16_mma.cuh), the wgmma
// wrappers, descriptors, fences and stage copies (kforge/wgmma.cuh), the epilogue
// (kforge/gemm_epilogue.cuh).  The tests' host emulation defines KF_EMULATED_PTX and supplies the
// PTX wrappers.
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/f16_mma.cuh"
#include "kforge/wgmma.cuh"
#include "kforge/block_order.cuh"
#include "kforge/gemm_epilogue.cuh"

__device__ __forceinline__ void kf_gemm(const kf_a_t* __restrict__ a, const kf_b_t* __restrict__ b,
                                        kf_c_t* __restrict__ c, int m, int n, int k, float alpha, float beta,
                                        const kf_bias_t* __restrict__ bias)
{
    extern __shared__ uint4 kf_smem16[];
    unsigned char* const As = kf_wg_stages(kf_smem16);
    unsigned char* const Bs = As + STAGES * A_STAGE;

    const int tid = threadIdx.x;
    const int wg = tid / 128;                  // this thread's warpgroup
    const int wl = tid % 128;                  // its place in the warpgroup

    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;

    // 16-byte copies where every row of the operand as stored is a multiple of 8 values, aligned
    const bool a_vec = ((KF_TRANS_A ? m : k) & 7) == 0 && (reinterpret_cast<unsigned long long>(a) & 15) == 0;
    const bool b_vec = ((KF_TRANS_B ? k : n) & 7) == 0 && (reinterpret_cast<unsigned long long>(b) & 15) == 0;
    auto load_tile = [&](int tile, int s) {
        const int k0 = tile * BK;
#if KF_TRANS_A
        kf_wg_load_mn<BM, THREADS>(As + s * A_STAGE, a, k, m, k0, bm, a_vec);     // k x m: M-major
#else
        kf_wg_load_k<BM, THREADS>(As + s * A_STAGE, a, m, k, bm, k0, a_vec);      // m x k: K-major
#endif
#if KF_TRANS_B
        kf_wg_load_k<BN, THREADS>(Bs + s * B_STAGE, b, n, k, bn, k0, b_vec);      // n x k: K-major
#else
        kf_wg_load_mn<BN, THREADS>(Bs + s * B_STAGE, b, k, n, k0, bn, b_vec);     // k x n: N-major
#endif
    };

    float acc[MT][ACC];
    kf_wg_mainloop<BN, MT, WGS, STAGES, INFLIGHT, KF_TRANS_A, !KF_TRANS_B, (bool)KF_AB_BF16>(
        acc, kf_smem_u32(As), kf_smem_u32(Bs), (k + BK - 1) / BK, load_tile);

    // epilogue: acc[t][i] is C[row0 + t*64 + 8*((i%4)/2)][col0 + 8*(i/4) + i%2]
    const int row0 = bm + wg * (MT * 64) + 16 * (wl / 32) + (wl % 32) / 4;
    const int col0 = bn + 2 * (wl % 4);
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + t * 64 + h * 8;
            if (row >= m) {
                continue;
            }
            kf_c_t* crow = c + (size_t)row * n;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = col0 + j * 8;
                if (col < n) kf_epi(acc[t][4 * j + 2 * h], crow, col, alpha, beta, bias);
                if (col + 1 < n) kf_epi(acc[t][4 * j + 2 * h + 1], crow, col + 1, alpha, beta, bias);
            }
        }
    }
}
