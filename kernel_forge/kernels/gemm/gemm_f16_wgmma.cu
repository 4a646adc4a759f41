// matmul_f16 -- expert pattern gemm_f16_wgmma: half-precision GEMM on Hopper's warpgroup tensor-core
// instructions (sm_90a: wgmma.mma_async, which mma.sync cannot match on an H100 or H200), fp16 A and
// B, fp32 accumulation, fp16 C (rounded once, to nearest).  Compiles only for sm_90a, the target kforge
// compiles for on a compute capability 9.0 GPU; for any other arch each setting stops at the #error
// below (a compile of a few milliseconds, then the gate refuses it by name).
// Tiling: a block of WGS warpgroups (128 threads each) computes a BM x BN tile of C, BM = 64 MT WGS:
// warpgroup g owns MT stacked 64 x BN tiles, each one wgmma.m64nBNk16 per 16 of k (A and B both read
// from shared memory by the tensor cores through descriptors; the accumulators, MT BN / 2 fp32 per
// thread, stay in registers).
// Pipeline (kf_wg_mainloop, kforge/wgmma.cuh): STAGES shared stages of A (BM x 64) and B (64 x BN),
// filled by cp.async 16-byte copies from every thread; per 64-deep slice one cp.async wait, a proxy
// fence (wgmma reads through the async proxy what cp.async wrote through the generic one) and one
// barrier, then the slice's 4 MT wgmmas as one batch.  INFLIGHT batches stay in flight across the
// next barrier (the tensor cores work while the block syncs); a stage is refilled only once the
// batch that read it has retired, so copies run STAGES - 1 - INFLIGHT slices ahead.
// Layout (the 128-byte swizzle the descriptors name, kforge/wgmma.cuh): A rows of 64 halves (128
// bytes), chunk c of row r at c ^ (r % 8); B in blocks of 64 columns, each its 64 k rows of 128
// bytes, chunk c of k row r at c ^ (r % 8).  Stages start 1024-byte aligned.
// Block order: groups of GROUP (8) block-rows walked column by column, for L2 reuse.
// Edges: any m, n, k.  A chunk of 8 halves is copied by cp.async where it is 16-byte aligned (A:
// k % 8 == 0, B: n % 8 == 0) -- then it lies wholly inside or outside the matrix, and outside is
// zero-filled -- else it is gathered half by half (zeros outside) and stored to shared memory
// directly.  Stores of C are checked.
// kforge: grid = [cdiv(n, BN), cdiv(m, 64 * MT * WGS), 1]
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

#include <cuda_fp16.h>

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

#define BK 64                              // one 128-byte swizzle row of halves
#define BM (64 * MT * WGS)
#define THREADS (128 * WGS)
#define A_STAGE (BM * BK * 2)              // bytes per A stage
#define B_STAGE (BK * BN * 2)              // bytes per B stage
#define ACC (BN / 2)                       // fp32 accumulators per thread per 64-row tile

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
#error "gemm_f16_wgmma needs sm_90a (wgmma.mma_async): compile it for a compute capability 9.0 GPU"
#endif

// -- the wgmma wrappers, descriptors, fences and the stages' copies from kforge/wgmma.cuh (over the
// 8-half chunk copy of kforge/f16_mma.cuh); the cp.async wrappers from kforge/cp_async.cuh.  The
// tests' host emulation defines KF_EMULATED_PTX and supplies the PTX wrappers.
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/f16_mma.cuh"
#include "kforge/wgmma.cuh"
#include "kforge/block_order.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
matmul_f16(const __half* __restrict__ a, const __half* __restrict__ b, __half* __restrict__ c,
           int m, int n, int k)
{
    extern __shared__ uint4 kf_smem16[];
    unsigned char* const As = kf_wg_stages(kf_smem16);        // [STAGES][BM][64 halves], swizzled
    unsigned char* const Bs = As + STAGES * A_STAGE;         // [STAGES][BN / 64][64 k][64 halves], swizzled

    const int tid = threadIdx.x;
    const int wg = tid / 128;                  // this thread's warpgroup
    const int wl = tid % 128;                  // its place in the warpgroup

    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;

    const bool a_vec = (k & 7) == 0;
    const bool b_vec = (n & 7) == 0;
    auto load_tile = [&](int tile, int s) {
        kf_wg_load_k<BM, THREADS>(As + s * A_STAGE, a, m, k, bm, tile * BK, a_vec);     // A K-major
        kf_wg_load_mn<BN, THREADS>(Bs + s * B_STAGE, b, k, n, tile * BK, bn, b_vec);    // B N-major
    };

    float acc[MT][ACC];
    kf_wg_mainloop<BN, MT, WGS, STAGES, INFLIGHT, 0, 1, false>(acc, kf_smem_u32(As), kf_smem_u32(Bs),
                                                              (k + BK - 1) / BK, load_tile);

    // epilogue: acc[t][i] is C[row0 + t*64 + 8*((i%4)/2)][col0 + 8*(i/4) + i%2], rounded to fp16
    const int row0 = bm + wg * (MT * 64) + 16 * (wl / 32) + (wl % 32) / 4;
    const int col0 = bn + 2 * (wl % 4);
    const bool pair = (n & 1) == 0;            // 4-byte stores where every row starts 4-byte aligned
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + t * 64 + h * 8;
            if (row >= m) {
                continue;
            }
            __half* crow = c + (size_t)row * n;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = col0 + j * 8;
                const float v0 = acc[t][4 * j + 2 * h], v1 = acc[t][4 * j + 2 * h + 1];
                kf_store2_f16(crow, col, n, v0, v1, pair);
            }
        }
    }
}
