// kforge: grid = [cdiv(@@N@@, BN), cdiv(@@M@@, 64 * WGS), @@BATCH@@]
// kforge: block = [128 * WGS, 1, 1]
// kforge: shared_mem = 128 * STAGES * (64 * WGS + 2 * BN) + 1024 * STAGES + 1024
// kforge: tune BN = [128, 64]
// kforge: tune WGS = [2, 1]
// kforge: tune STAGES = [4, 3, 5, 2]
// kforge: tune GROUP = [8, 16, 4]
// kforge: constraint (8 * BN) % (128 * WGS) == 0 and BN <= 64 * WGS
// kforge: constraint STAGES >= 3 or BN == 64
// kforge: constraint 128 * STAGES * (64 * WGS + 2 * BN) + 1024 * STAGES + 1024 <= 232448
// Bound pattern gemm_tf32x3_wg (from gemm_tf32x3_wgmma; Hopper only, sm_90a): fp32 GEMM on the
// warpgroup tensor-core instruction wgmma.mma_async with TF32 operands and the three-product split
// (fp32-level error), and the epilogue C = alpha * acc (+ beta * C) (+ bias[col]).  A is m x k (or
// k x m when KF_TRANS_A), B is k x n (or n x k when KF_TRANS_B: a linear layer's weight); the main
// loop (kforge/tf32x3_wgmma.cuh) copies A in its own layout and reads its fragments into registers,
// and stages B through registers into K-major hi and lo tiles from either layout.  WGS warpgroups
// of one 64 x BN tile each, STAGES stages (1024 bytes each beyond the tiles: the k x m layout of A
// pads its rows), any m, n, k.  (Two stages at BN = 128 spill on a batched product, whose pointers
// take registers of their own: left out.)  Compiled for another arch than sm_90a, it
// stops at the #error below; the tuner drops it on such a GPU before gating it.
#ifndef BN
#define BN 128
#endif
#ifndef WGS
#define WGS 2
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP
#define GROUP 8
#endif

#define BM (64 * WGS)
#define THREADS (128 * WGS)
#define KF_THREADS THREADS, 1

#if (BN != 64 && BN != 128) || WGS < 1 || (8 * BN) % THREADS || STAGES < 2
#error "BN 64 or 128; WGS at least 1, 8 BN a multiple of 128 WGS; STAGES >= 2"
#endif
#if !defined(KF_EMULATED_PTX) && defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_tf32x3_wg needs sm_90a (wgmma.mma_async): compile it for a compute capability 9.0 GPU"
#endif

// -- the TF32 split (kforge/tf32_mma.cuh), the cp.async wrappers (kforge/cp_async.cuh), the wgmma
// wrappers (kforge/wgmma.cuh), the main loop (kforge/tf32x3_wgmma.cuh), the epilogue
// (kforge/gemm_epilogue.cuh).  The tests' host emulation defines KF_EMULATED_PTX and supplies the
// PTX wrappers.
#include "kforge/tf32_mma.cuh"
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/wgmma.cuh"
#include "kforge/tf32x3_wgmma.cuh"
#include "kforge/block_order.cuh"
#include "kforge/gemm_epilogue.cuh"

__device__ __forceinline__ void kf_gemm(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                        int m, int n, int k, float alpha, float beta, const float* __restrict__ bias)
{
    extern __shared__ uint4 kf_smem16[];
    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;

    // 16-byte copies and loads where every row of the operand as stored is a multiple of 4 floats, aligned
    const bool a_vec = ((KF_TRANS_A ? m : k) & 3) == 0 && (reinterpret_cast<unsigned long long>(a) & 15) == 0;
    const bool b_vec = ((KF_TRANS_B ? k : n) & 3) == 0 && (reinterpret_cast<unsigned long long>(b) & 15) == 0;
    float acc[BN / 2];
    kf_tf32x3_wg_mainloop<BN, WGS, STAGES, (bool)KF_TRANS_A, (bool)KF_TRANS_B>(acc, kf_wg_stages(kf_smem16), a, b,
                                                                               m, n, k, bm, bn, a_vec, b_vec);

    // epilogue: acc[i] is C[row0 + 8*((i%4)/2)][col0 + 8*(i/4) + i%2]
    const int wl = threadIdx.x % 128;
    const int row0 = bm + (threadIdx.x / 128) * 64 + 16 * (wl / 32) + (wl % 32) / 4;
    const int col0 = bn + 2 * (wl % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row0 + h * 8;
        if (row >= m) {
            continue;
        }
        float* crow = c + (size_t)row * n;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = col0 + j * 8;
            if (col < n) kf_epi(acc[4 * j + 2 * h], crow, col, alpha, beta, bias);
            if (col + 1 < n) kf_epi(acc[4 * j + 2 * h + 1], crow, col + 1, alpha, beta, bias);
        }
    }
}
