// matmul_f32 -- expert pattern gemm_tf32x3_wgmma: fp32 GEMM at fp32-level error on Hopper's warpgroup
// tensor-core instructions (sm_90a: wgmma.mma_async with TF32 operands), with the three-product split
// of gemm_tf32x3_mma: x = x_hi + x_lo, both TF32 (round to nearest), and
//     a * b ~= a_lo*b_hi + a_hi*b_lo + a_hi*b_hi        (a_lo*b_lo, ~2^-22 relative, dropped).
// Compiles only for sm_90a, the target kforge compiles for on a compute capability 9.0 GPU; for any
// other arch each setting stops at the #error below.
// Tiling: a block of WGS warpgroups (128 threads each) computes a BM x BN tile of C, BM = 64 WGS;
// each warpgroup one 64 x BN tile, one wgmma.m64nBNk8 per product per 8 of k.  (Two tiles per
// warpgroup would spill: each holds a running and a fresh accumulator, and its A fragments.)
// The main loop (kforge/tf32x3_wgmma.cuh, shared with the bound gemm_tf32x3_wg): TF32 wgmma reads
// B only K-major, and B (k x n) runs along n, so B is staged through registers: loaded a slice
// ahead, split, stored transposed into K-major hi and lo tiles in the 128-byte swizzle.  A (m x k)
// is copied raw by cp.async; each warpgroup reads its fragments into registers, splits them there
// and hands them to the wgmma as its register operand.  Each 32-deep slice's 12 products go into a
// fresh accumulator, added to the running total in fp32, so that the tensor cores' cut toward zero
// does not pile up: 0.014 of the tolerance at k = 4096 in the emulation of the cut.  STAGES shared
// stages filled STAGES - 1 slices ahead, one barrier per slice.
// Block order: groups of GROUP block-rows walked column by column, for L2 reuse.
// Edges: any m, n, k (16-byte copies and loads where k, or n, is a multiple of 4; else float by
// float; zeros outside).  Stores of C are checked.  Deterministic: a fixed order of products.
// kforge: grid = [cdiv(n, BN), cdiv(m, 64 * WGS), 1]
// kforge: block = [128 * WGS, 1, 1]
// kforge: shared_mem = 128 * STAGES * (64 * WGS + 2 * BN) + 1024
// kforge: tune BN = [128, 64]
// kforge: tune WGS = [2, 1]
// kforge: tune STAGES = [4, 3, 5, 2]
// kforge: tune GROUP = [8, 16, 4]
// kforge: constraint (8 * BN) % (128 * WGS) == 0 and BN <= 64 * WGS
// kforge: constraint 128 * STAGES * (64 * WGS + 2 * BN) + 1024 <= 232448

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

#if (BN != 64 && BN != 128) || WGS < 1 || (8 * BN) % THREADS || STAGES < 2
#error "BN 64 or 128; WGS at least 1, 8 BN a multiple of 128 WGS; STAGES >= 2"
#endif
#if !defined(KF_EMULATED_PTX) && defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_tf32x3_wgmma needs sm_90a (wgmma.mma_async): compile it for a compute capability 9.0 GPU"
#endif

// -- the TF32 split (kforge/tf32_mma.cuh), the cp.async wrappers (kforge/cp_async.cuh), the wgmma
// wrappers, descriptors and fences (kforge/wgmma.cuh), the main loop (kforge/tf32x3_wgmma.cuh).
// The tests' host emulation defines KF_EMULATED_PTX and supplies the PTX wrappers.
#include "kforge/tf32_mma.cuh"
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/wgmma.cuh"
#include "kforge/tf32x3_wgmma.cuh"
#include "kforge/block_order.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
           int m, int n, int k)
{
    extern __shared__ uint4 kf_smem16[];
    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;

    float acc[BN / 2];
    kf_tf32x3_wg_mainloop<BN, WGS, STAGES, false, false>(acc, kf_wg_stages(kf_smem16), a, b, m, n, k, bm, bn,
                                                         (k & 3) == 0, (n & 3) == 0);

    // epilogue: acc[i] is C[row0 + 8*((i%4)/2)][col0 + 8*(i/4) + i%2]
    const int wl = threadIdx.x % 128;
    const int row0 = bm + (threadIdx.x / 128) * 64 + 16 * (wl / 32) + (wl % 32) / 4;
    const int col0 = bn + 2 * (wl % 4);
    const bool pair = (n & 1) == 0;            // 8-byte stores where every row starts 8-byte aligned
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
            const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if (pair && col + 1 < n) {
                *reinterpret_cast<float2*>(crow + col) = make_float2(v0, v1);
            } else {
                if (col < n) crow[col] = v0;
                if (col + 1 < n) crow[col + 1] = v1;
            }
        }
    }
}
