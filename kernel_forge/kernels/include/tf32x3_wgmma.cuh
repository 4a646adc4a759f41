// kforge/tf32x3_wgmma.cuh -- the main loop of the library's split-precision TF32 GEMMs on Hopper's
// warpgroup MMA (sm_90a): gemm/gemm_tf32x3_wgmma (matmul_f32) and the bound gemm/gemm_tf32x3_wg.
// kforge/tf32_mma.cuh (the split), kforge/cp_async.cuh and kforge/wgmma.cuh come before it.  NVRTC
// gets it in memory by this name (kernel_forge/kernels/library.py).
//
// Three TF32 products per term, x = x_hi + x_lo, both TF32 (round to nearest):
//     a * b ~= a_lo*b_hi + a_hi*b_lo + a_hi*b_hi        (a_lo*b_lo, ~2^-22 relative, dropped)
// A block of WGS_ warpgroups computes a (64 WGS_) x BN_ tile; warpgroup g owns rows 64 g .. 64 g + 63,
// one wgmma.m64nBN_k8 per product per 8 of k, its BN_ / 2 fp32 accumulators per thread in registers.
// Operands (TF32 wgmma takes B only K-major, A from registers or K-major shared memory):
//  - B goes through registers: every thread loads its float4s of a slice one iteration before it
//    splits them and stores hi and lo into two K-major tiles (rows along n of 32 k values, the 128-byte swizzle:
//    chunk c of row r at c ^ (r % 8)).  Stored k x n (TB = 0) the float4s run along n and are stored
//    transposed, a warp taking 16 k rows x 2 float4s so that its 32 stores meet 32 distinct banks;
//    stored n x k (TB = 1) they run along k and are stored whole.
//  - A is copied raw by cp.async in its own layout -- m x k (TA = 0) in the swizzle, k x m (TA = 1)
//    as rows of BM_ + 8 floats -- and each warpgroup reads its m64k8 fragments into registers, splits
//    them there and hands them to the wgmma (a warp's fragment reads meet 32 distinct banks either way).
// Accuracy: the tensor cores cut each sum toward zero, which piles up when slice after slice is
// added into one running total (2.1x of matmul_f32's tolerance at k = 4096 with mma.sync).  Each
// 32-deep slice's 12 products go into a fresh accumulator (the slice's first wgmma ignores its
// input), added to the running total by fp32 adds: 0.014 of the tolerance at k = 4096 in the
// emulation of the cut (0.027 with a fresh accumulator per 8 of k, as gemm_tf32x3_mma has).
// Pipeline: STAGES_ stages [A | B_hi | B_lo], each 1024-byte aligned, filled STAGES_ - 1 slices
// ahead: per slice one cp.async wait, a proxy fence (the tensor cores read through the async proxy
// what cp.async and the stores wrote through the generic one) and one barrier; the slice's 12
// wgmmas as one batch; while it runs, the refill of the stage the previous slice used; its wait;
// the fp32 adds.
// Edges: any m, n, k: 16-byte copies and loads where a_vec / b_vec say every row of the operand as
// stored is a multiple of 4 floats and 16-byte aligned (a chunk then lies wholly inside or outside,
// and outside is zero), else float by float with zeros outside.

// the byte offset of float `col` (0..31) of row `row` in a 128-byte-swizzled tile
__device__ __forceinline__ int kf_sw32(int row, int col)
{
    return row * 128 + ((((col >> 2) ^ row) & 7) << 4) + ((col & 3) << 2);
}

// the bytes of a stage: A, then B_hi and B_lo
template <int WGS_, bool TA>
__host__ __device__ constexpr int kf_tf32wg_a_bytes() { return TA ? 32 * (64 * WGS_ + 8) * 4 : 64 * WGS_ * 128; }
template <int BN_, int WGS_, bool TA>
__host__ __device__ constexpr int kf_tf32wg_stage_bytes() { return kf_tf32wg_a_bytes<WGS_, TA>() + 2 * BN_ * 128; }

// acc = A (m x k, or k x m when TA) * B (k x n, or n x k when TB) over this block's tile (rows bm.., columns
// bn..), the stages at S (1024-byte aligned)
template <int BN_, int WGS_, int STAGES_, bool TA, bool TB>
__device__ __forceinline__ void kf_tf32x3_wg_mainloop(float (&acc)[BN_ / 2], unsigned char* S,
                                                      const float* __restrict__ a, const float* __restrict__ b,
                                                      int m, int n, int k, int bm, int bn, bool a_vec, bool b_vec)
{
    constexpr int BM_ = 64 * WGS_, THREADS_ = 128 * WGS_, R = BN_ / 2, LEAD = STAGES_ - 1;
    constexpr int A_ST = kf_tf32wg_a_bytes<WGS_, TA>(), STAGE = kf_tf32wg_stage_bytes<BN_, WGS_, TA>();
    constexpr int B_TILE = BN_ * 128, B_VECS = 8 * BN_ / THREADS_, A_LD = BM_ + 8;
    static_assert((8 * BN_) % THREADS_ == 0 && STAGES_ >= 2, "B's float4s divide among the threads; STAGES >= 2");
    const int tid = threadIdx.x, wl = tid % 128;
    const int g = (wl % 32) / 4, q = wl % 4;            // the fragments' row and column in an 8 x 4 group
    const int ntiles = (k + 31) / 32;

    auto load_a = [&](int tile, int s) {
        unsigned char* as = S + s * STAGE;
#pragma unroll
        for (int i = 0; i < BM_ * 8 / THREADS_; ++i) {
            const int f = tid + i * THREADS_;
            // TA: 32 k rows of BM_ / 4 chunks along m; else BM_ rows of 8 chunks along k
            const int row = TA ? f / (BM_ / 4) : f / 8, ch = TA ? f % (BM_ / 4) : f % 8;
            const int gr = TA ? tile * 32 + row : bm + row, gc = TA ? bm + 4 * ch : tile * 32 + 4 * ch;
            const int nr = TA ? k : m, nc = TA ? m : k;
            float* dst = reinterpret_cast<float*>(as + (TA ? 4 * (row * A_LD + 4 * ch) : kf_sw32(row, 4 * ch)));
            const float* src = a + (size_t)gr * nc + gc;
            if (a_vec) {
                const bool in = gr < nr && gc < nc;
                kf_cp_async16(dst, in ? src : a, in ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool in = gr < nr && gc + e < nc;
                    kf_cp_async4(dst + e, in ? src + e : a, in ? 4 : 0);
                }
            }
        }
    };

    // B's float4 i of this thread: (the k row, the n column) of its first value
    auto b_at = [&](int i, int& kr, int& col) {
        const int f = tid + i * THREADS_;
        if (TB) {                              // BN_ rows along n of 8 float4s along k
            kr = 4 * (f % 8);
            col = f / 8;
        } else {                               // per warp 16 k rows x 2 float4s along n
            const int w = f / 32, l = f % 32;
            kr = (w % 2) * 16 + l % 16;
            col = 4 * ((w / 2) * 2 + l / 16);
        }
    };
    float4 breg[B_VECS];
    auto load_b = [&](int tile) {
#pragma unroll
        for (int i = 0; i < B_VECS; ++i) {
            int kr, col;
            b_at(i, kr, col);
            const int gk = tile * 32 + kr, gn = bn + col;
            const float* src = b + (TB ? (size_t)gn * k + gk : (size_t)gk * n + gn);
            const bool row_in = TB ? gn < n : gk < k;        // the row of B as stored
            const int left = TB ? k - gk : n - gn;            // values of the row from src on
            if (b_vec) {
                breg[i] = row_in && left > 0 ? __ldg(reinterpret_cast<const float4*>(src)) : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                breg[i].x = row_in && left > 0 ? __ldg(src) : 0.0f;
                breg[i].y = row_in && left > 1 ? __ldg(src + 1) : 0.0f;
                breg[i].z = row_in && left > 2 ? __ldg(src + 2) : 0.0f;
                breg[i].w = row_in && left > 3 ? __ldg(src + 3) : 0.0f;
            }
        }
    };
    auto store_b = [&](int s) {
        unsigned char* bhi = S + s * STAGE + A_ST;
        unsigned char* blo = bhi + B_TILE;
#pragma unroll
        for (int i = 0; i < B_VECS; ++i) {
            int kr, col;
            b_at(i, kr, col);
            const float v[4] = {breg[i].x, breg[i].y, breg[i].z, breg[i].w};
            unsigned hi[4], lo[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                kf_split(v[j], hi[j], lo[j]);
            }
            if (TB) {                          // 4 k values of row col: one 16-byte chunk
                const int off = kf_sw32(col, kr);
                *reinterpret_cast<uint4*>(bhi + off) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
                *reinterpret_cast<uint4*>(blo + off) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
            } else {                           // 4 columns of k row kr: one value in each of 4 rows
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int off = kf_sw32(col + j, kr);
                    *reinterpret_cast<unsigned*>(bhi + off) = hi[j];
                    *reinterpret_cast<unsigned*>(blo + off) = lo[j];
                }
            }
        }
    };

    float part[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        acc[i] = 0.0f;
        part[i] = 0.0f;
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
    const int arow = (tid / 128) * 64 + 16 * (wl / 32) + g;     // this thread's first fragment row
#pragma unroll 1
    for (int tile = 0; tile < ntiles; ++tile) {
        kf_cp_async_wait<LEAD - 1>();          // slice `tile`'s A has landed (this thread's copies) ...
        kf_fence_proxy_async();                // ... it and B are visible to the tensor cores' reads ...
        __syncthreads();                       // ... and so is everyone's; the previous slice's batch
                                               // has retired everywhere: its stage is free
        const int s = tile % STAGES_;
        const float* as = reinterpret_cast<const float*>(S + s * STAGE);
        unsigned ahi[4][4], alo[4][4];         // [8 of k][fragment: rows r, r + 8; columns c, c + 4]
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int r = arow + 8 * (v % 2), c = 8 * kk + q + 4 * (v / 2);
                kf_split(as[TA ? c * A_LD + r : kf_sw32(r, c) / 4], ahi[kk][v], alo[kk][v]);
            }
        }
        const unsigned bhi = s0 + s * STAGE + A_ST, blo = bhi + B_TILE;
        kf_wgmma_hold<R>(part);
        kf_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            // the next 8 of k: 32 bytes along each K-major row
            const unsigned long long dhi = kf_wgmma_desc(bhi + kk * 32, 16, 1024);
            const unsigned long long dlo = kf_wgmma_desc(blo + kk * 32, 16, 1024);
            kf_wgmma_tf32<BN_>(part, alo[kk], dhi, kk > 0);     // the slice's first: a fresh sum
            kf_wgmma_tf32<BN_>(part, ahi[kk], dlo, 1);
            kf_wgmma_tf32<BN_>(part, ahi[kk], dhi, 1);
        }
        kf_wgmma_commit();
        // while the batch runs: refill the stage of slice tile - 1 (retired before the barrier) with
        // slice tile + LEAD, and load the B of the one after
        const int next = tile + LEAD;
        if (next < ntiles) {
            load_a(next, next % STAGES_);
            store_b(next % STAGES_);
        }
        kf_cp_async_commit();
        if (next + 1 < ntiles) {
            load_b(next + 1);
        }
        kf_wgmma_wait<0>();
        kf_wgmma_hold<R>(part);
        kf_wgmma_hold_u<16>(&ahi[0][0]);
        kf_wgmma_hold_u<16>(&alo[0][0]);
#pragma unroll
        for (int i = 0; i < R; ++i) {
            acc[i] += part[i];
        }
    }
}
