// matmul_f32 -- expert pattern gemm_tf32x3_wgmma: fp32 GEMM at fp32-level error on Hopper's warpgroup
// tensor-core instructions (sm_90a: wgmma.mma_async with TF32 operands), with the three-product split
// of gemm_tf32x3_mma: x = x_hi + x_lo, both TF32 (round to nearest), and
//     a * b ~= a_lo*b_hi + a_hi*b_lo + a_hi*b_hi        (a_lo*b_lo, ~2^-22 relative, dropped).
// Compiles only for sm_90a, the target kforge compiles for on a compute capability 9.0 GPU; for any
// other arch each setting stops at the #error below.
// Tiling: a block of WGS warpgroups (128 threads each) computes a BM x BN tile of C, BM = 64 MT WGS;
// warpgroup g owns MT stacked 64 x BN tiles, each one wgmma.m64nBNk8 per product per 8 of k.  MT is
// not tuned: a second tile's running and fresh accumulators and A fragments spill at any BN.
// Operands: TF32 wgmma reads B only K-major, and B (k x n) runs along n.  So B is staged through
// registers: every thread loads float4s along n a slice ahead, splits them and stores hi and lo
// transposed into two K-major tiles (a warp's 32 stores land in 32 distinct banks).  A (m x k, K-major
// already) is copied raw by cp.async; each warpgroup reads its fragments from the stage into
// registers, splits them there, and hands them to the wgmma as its register A operand.
// Accuracy: the tensor cores cut each sum toward zero, which piles up when slice after slice is
// added into one running total (2.1x of the tolerance at k = 4096: gemm_tf32x3_mma's note).  So each
// 32-deep slice's 12 products go into a fresh accumulator (the first wgmma of the slice ignores its
// input), which is then added to the running total by fp32 adds: 0.014 of the tolerance at k = 4096
// in the emulation of the cut (0.027 with a fresh accumulator per 8 of k).
// Pipeline: STAGES shared stages, each A (BM x 32 floats), B_hi and B_lo (BN x 32 floats), all in the
// 128-byte swizzle (chunk c of row r at c ^ (r % 8)), filled STAGES - 1 slices ahead: per slice one
// cp.async wait, a proxy fence and one barrier, the slice's 12 MT wgmmas as one batch, the refill of
// the stage the previous slice used (while the batch runs), the batch's wait, the fp32 adds.
// Block order: groups of GROUP block-rows walked column by column, for L2 reuse.
// Edges: any m, n, k: 16-byte copies and loads where a chunk of 4 floats is aligned (A: k % 4 == 0,
// B: n % 4 == 0) -- then it lies wholly inside or outside, and outside is zero -- else float by float
// with zeros outside.  Stores of C are checked.  Deterministic: a fixed order of products per output.
// kforge: grid = [cdiv(n, BN), cdiv(m, 64 * MT * WGS), 1]
// kforge: block = [128 * WGS, 1, 1]
// kforge: shared_mem = 128 * STAGES * (64 * MT * WGS + 2 * BN) + 1024
// kforge: tune BN = [128, 64]
// kforge: tune WGS = [2, 1]
// kforge: tune STAGES = [4, 3, 5, 2]
// kforge: tune GROUP = [8, 16, 4]
// kforge: define MT = 1
// kforge: constraint (8 * BN) % (128 * WGS) == 0 and BN <= 64 * WGS
// kforge: constraint 128 * STAGES * (64 * MT * WGS + 2 * BN) + 1024 <= 232448

#ifndef BN
#define BN 128
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
#ifndef GROUP
#define GROUP 8
#endif

#define BK 32                              // one 128-byte swizzle row of floats
#define BM (64 * MT * WGS)
#define THREADS (128 * WGS)
#define A_STAGE (BM * 128)                 // an A stage
#define B_TILE (BN * 128)                 // a B_hi or B_lo stage
#define STAGE_BYTES (A_STAGE + 2 * B_TILE)
#define ACC (BN / 2)                       // fp32 accumulators per thread per 64-row tile
#define B_VECS (8 * BN / THREADS)          // float4s of a B slice per thread
#define LEAD (STAGES - 1)                 // slices staged ahead of the math

#if (BN != 64 && BN != 128) || MT < 1 || WGS < 1 || MT * BN > 128
#error "BN 64 or 128, MT and WGS at least 1, MT * BN at most 128"
#endif
#if (8 * BN) % THREADS || STAGES < 2
#error "the B slice's float4s must divide evenly among the threads; STAGES >= 2"
#endif
#if !defined(KF_EMULATED_PTX) && defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_tf32x3_wgmma needs sm_90a (wgmma.mma_async): compile it for a compute capability 9.0 GPU"
#endif

// -- the TF32 split (kforge/tf32_mma.cuh), the cp.async wrappers (kforge/cp_async.cuh), the wgmma
// wrappers, descriptors and fences (kforge/wgmma.cuh).  The tests' host emulation defines
// KF_EMULATED_PTX and supplies the PTX wrappers.
#include "kforge/tf32_mma.cuh"
#ifndef KF_EMULATED_PTX
#include "kforge/cp_async.cuh"
#endif
#include "kforge/wgmma.cuh"
#include "kforge/block_order.cuh"

// the byte offset of float `col` (0..31) of row `row` in a 128-byte-swizzled tile
__device__ __forceinline__ int kf_sw32(int row, int col)
{
    return row * 128 + ((((col >> 2) ^ row) & 7) << 4) + ((col & 3) << 2);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
           int m, int n, int k)
{
    extern __shared__ uint4 kf_smem16[];
    unsigned char* const S = kf_wg_stages(kf_smem16);   // [STAGES][A | B_hi | B_lo], swizzled

    const int tid = threadIdx.x;
    const int wg = tid / 128;                  // this thread's warpgroup
    const int wl = tid % 128;                  // its place in the warpgroup
    const int g = (wl % 32) / 4, q = wl % 4;   // the fragments' row and column in an 8 x 4 group

    int by, bx;
    kf_grouped_block(GROUP, by, bx);
    const int bm = by * BM;
    const int bn = bx * BN;
    const int ntiles = (k + BK - 1) / BK;

    // A: BM rows of 8 chunks of 4 floats, by cp.async (zeros outside)
    const bool a_vec = (k & 3) == 0;
    auto load_a = [&](int tile, int s) {
        unsigned char* as = S + s * STAGE_BYTES;
#pragma unroll
        for (int i = 0; i < BM * 8 / THREADS; ++i) {
            const int f = tid + i * THREADS;
            const int row = f / 8, gr = bm + row, gc = tile * BK + (f % 8) * 4;
            float* dst = reinterpret_cast<float*>(as + kf_sw32(row, (f % 8) * 4));
            const float* src = a + (size_t)gr * k + gc;
            if (a_vec) {
                const bool in = gr < m && gc < k;
                kf_cp_async16(dst, in ? src : a, in ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool in = gr < m && gc + e < k;
                    kf_cp_async4(dst + e, in ? src + e : a, in ? 4 : 0);
                }
            }
        }
    };

    // B: a slice's 32 k rows of BN / 4 float4s, loaded into registers; within a warp 16 k rows x 2
    // float4s (32-byte runs), so that the transposed stores below meet 32 distinct banks
    const bool b_vec = (n & 3) == 0;
    float4 breg[B_VECS];
    auto load_b = [&](int tile) {
#pragma unroll
        for (int i = 0; i < B_VECS; ++i) {
            const int f = tid + i * THREADS, w = f / 32, l = f % 32;
            const int gr = tile * BK + (w % 2) * 16 + l % 16, gc = bn + 4 * ((w / 2) * 2 + l / 16);
            const float* src = b + (size_t)gr * n + gc;
            if (b_vec) {
                breg[i] = gr < k && gc < n ? __ldg(reinterpret_cast<const float4*>(src)) : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                breg[i].x = gr < k && gc < n ? __ldg(src) : 0.0f;
                breg[i].y = gr < k && gc + 1 < n ? __ldg(src + 1) : 0.0f;
                breg[i].z = gr < k && gc + 2 < n ? __ldg(src + 2) : 0.0f;
                breg[i].w = gr < k && gc + 3 < n ? __ldg(src + 3) : 0.0f;
            }
        }
    };
    // ... split and stored transposed: row n of B_hi / B_lo holds that column's 32 k values
    auto store_b = [&](int s) {
        unsigned char* bhi = S + s * STAGE_BYTES + A_STAGE;
        unsigned char* blo = bhi + B_TILE;
#pragma unroll
        for (int i = 0; i < B_VECS; ++i) {
            const int f = tid + i * THREADS, w = f / 32, l = f % 32;
            const int kr = (w % 2) * 16 + l % 16, col = 4 * ((w / 2) * 2 + l / 16);
            const float v[4] = {breg[i].x, breg[i].y, breg[i].z, breg[i].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                unsigned hi, lo;
                kf_split(v[j], hi, lo);
                const int off = kf_sw32(col + j, kr);
                *reinterpret_cast<unsigned*>(bhi + off) = hi;
                *reinterpret_cast<unsigned*>(blo + off) = lo;
            }
        }
    };

    float acc[MT][ACC], part[MT][ACC];
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int i = 0; i < ACC; ++i) {
            acc[t][i] = 0.0f;
            part[t][i] = 0.0f;
        }
    }

    // prologue: LEAD slices staged (a cp.async group committed even when empty, so that the wait
    // counts the same in every iteration), the next one's B in registers
#pragma unroll 1
    for (int s = 0; s < LEAD; ++s) {
        if (s < ntiles) {
            load_a(s, s);
            load_b(s);
            store_b(s);
        }
        kf_cp_async_commit();
    }
    if (LEAD < ntiles) {
        load_b(LEAD);
    }

    const unsigned s0 = kf_smem_u32(S);
    const int arow = wg * (MT * 64) + 16 * (wl / 32) + g;      // this thread's first fragment row
#pragma unroll 1
    for (int tile = 0; tile < ntiles; ++tile) {
        kf_cp_async_wait<LEAD - 1>();         // slice `tile`'s A has landed (this thread's copies) ...
        kf_fence_proxy_async();                // ... it and B are visible to the tensor cores' reads ...
        __syncthreads();                       // ... and so is everyone's; the previous slice's batch
                                               // has retired everywhere: its stage is free
        const int s = tile % STAGES;
        const unsigned char* as = S + s * STAGE_BYTES;
        unsigned ahi[MT][4][4], alo[MT][4][4];  // [tile][8 of k][fragment]
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            const int r = arow + t * 64;
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const float* p = reinterpret_cast<const float*>(as + kf_sw32(r, kk * 8 + q));
                const float* p4 = reinterpret_cast<const float*>(as + kf_sw32(r, kk * 8 + q + 4));
                kf_split(p[0], ahi[t][kk][0], alo[t][kk][0]);        // A[r][8 kk + q]
                kf_split(p[256], ahi[t][kk][1], alo[t][kk][1]);      // A[r + 8][8 kk + q]: 8 rows, 1024 bytes on
                kf_split(p4[0], ahi[t][kk][2], alo[t][kk][2]);       // A[r][8 kk + q + 4]
                kf_split(p4[256], ahi[t][kk][3], alo[t][kk][3]);     // A[r + 8][8 kk + q + 4]
            }
        }
        const unsigned bhi = s0 + s * STAGE_BYTES + A_STAGE, blo = bhi + B_TILE;
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            kf_wgmma_hold<ACC>(part[t]);
        }
        kf_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            // the next 8 of k: 32 bytes along each K-major row
            const unsigned long long dhi = kf_wgmma_desc(bhi + kk * 32, 16, 1024);
            const unsigned long long dlo = kf_wgmma_desc(blo + kk * 32, 16, 1024);
#pragma unroll
            for (int t = 0; t < MT; ++t) {
                kf_wgmma_tf32<BN>(part[t], alo[t][kk], dhi, kk > 0);   // the slice's first: a fresh sum
                kf_wgmma_tf32<BN>(part[t], ahi[t][kk], dlo, 1);
                kf_wgmma_tf32<BN>(part[t], ahi[t][kk], dhi, 1);
            }
        }
        kf_wgmma_commit();
        // while the batch runs: refill the stage of slice tile - 1 (retired before the barrier) with
        // slice tile + LEAD, and load the B of the one after
        const int next = tile + LEAD;
        if (next < ntiles) {
            load_a(next, next % STAGES);
            store_b(next % STAGES);
        }
        kf_cp_async_commit();
        if (next + 1 < ntiles) {
            load_b(next + 1);
        }
        kf_wgmma_wait<0>();
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            kf_wgmma_hold<ACC>(part[t]);
            kf_wgmma_hold_u<16>(&ahi[t][0][0]);
            kf_wgmma_hold_u<16>(&alo[t][0][0]);
#pragma unroll
            for (int i = 0; i < ACC; ++i) {
                acc[t][i] += part[t][i];
            }
        }
    }

    // epilogue: acc[t][i] is C[row0 + t*64 + 8*((i%4)/2)][col0 + 8*(i/4) + i%2]
    const int row0 = bm + arow;
    const int col0 = bn + 2 * q;
    const bool pair = (n & 1) == 0;            // 8-byte stores where every row starts 8-byte aligned
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + t * 64 + h * 8;
            if (row >= m) {
                continue;
            }
            float* crow = c + (size_t)row * n;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int col = col0 + j * 8;
                const float v0 = acc[t][4 * j + 2 * h], v1 = acc[t][4 * j + 2 * h + 1];
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
