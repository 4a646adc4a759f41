// kforge/wgmma.cuh -- the Hopper warpgroup MMA pieces (sm_90a only: NVRTC compiles for sm_90a on a
// compute capability 9.0 GPU) of the library's wgmma GEMMs: shared-memory matrix descriptors, the
// fences, commit and wait, wgmma.mma_async.m64nNk16 with fp16 or bf16 operands and fp32 accumulators
// for N = 64, 128 and 256 (gemm/gemm_f16_wgmma, gemm/gemm_f16_wg), and m64nNk8 with TF32 operands, A
// from registers, for N = 64 and 128 (gemm/gemm_tf32x3_wgmma).  NVRTC gets it in memory by this name
// (kernel_forge/kernels/library.py).  The tests' host emulation defines KF_EMULATED_PTX and supplies
// the PTX wrappers, written from the PTX ISA's descriptor and layout tables; the descriptor's
// encoding is shared with it.
//
// Both operands come from shared memory in the 128-byte swizzle: a row of 128 bytes holds 8 chunks
// of 16 bytes, chunk c of row r at c ^ (r % 8), and every 8 rows (1024 bytes) start 1024-byte
// aligned.  A (64 x 16 of an M x K tile, K-major) is rows of 64 halves along k: SBO = 1024 (from
// 8 rows to the next 8), LBO unused; the k-th 16 of a row start 32 k bytes in.  B (16 x N, N-major,
// imm-trans-b = 1) is blocks of 64 columns, each its k rows of 128 bytes: LBO = a block's bytes
// (from 64 columns to the next 64), SBO = 1024 (from 8 k rows to the next 8).
//
// Accumulators of a m64nN tile (N / 2 per thread): warp w of the warpgroup, lane l, register i hold
//   D[16 w + l / 4 + 8 ((i % 4) / 2)][8 (i / 4) + 2 (l % 4) + i % 2]
// (the mma.sync m16n8 C fragment, repeated for every 8 columns).

// the descriptor of a swizzled (128-byte) operand at shared address `saddr`
__device__ __forceinline__ unsigned long long kf_wgmma_desc(unsigned saddr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((saddr & 0x3FFFF) >> 4)
         | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16)
         | ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32)
         | (1ull << 62);                                   // 1: 128-byte swizzle
}

// The copies of one operand's tile into its 128-byte-swizzled stage (kf_copy8: kforge/f16_mma.cuh,
// included before this), THREADS threads taking consecutive 16-byte chunks (coalesced rows).
// K-major: ROWS rows (along M or N) of 64 k values, from a row-major matrix whose rows run along k
// (nrows x ncols, ncols the k extent), its (r0, c0) at the tile's start.
template <int ROWS, int THREADS_, typename T>
__device__ __forceinline__ void kf_wg_load_k(unsigned char* dst, const T* __restrict__ mat, int nrows, int ncols,
                                             int r0, int c0, bool vec)
{
#pragma unroll
    for (int i = 0; i < ROWS * 8 / THREADS_; ++i) {
        const int f = threadIdx.x + i * THREADS_;
        const int row = f / 8, ch = f % 8;
        kf_copy8(dst + row * 128 + ((ch ^ (row & 7)) << 4), mat, nrows, ncols, r0 + row, c0 + ch * 8, vec);
    }
}
// MN-major: 64 k rows of COLS values (along M or N), from a row-major matrix whose rows run along M
// or N (nrows the k extent), its (r0, c0) at the tile's start; blocks of 64 columns, each its 64 k
// rows of 128 bytes (8192 bytes a block: the descriptor's LBO)
template <int COLS, int THREADS_, typename T>
__device__ __forceinline__ void kf_wg_load_mn(unsigned char* dst, const T* __restrict__ mat, int nrows, int ncols,
                                              int r0, int c0, bool vec)
{
#pragma unroll
    for (int i = 0; i < 64 * (COLS / 8) / THREADS_; ++i) {
        const int f = threadIdx.x + i * THREADS_;
        const int row = f / (COLS / 8), ch = f % (COLS / 8);
        kf_copy8(dst + (ch / 8) * 8192 + row * 128 + (((ch % 8) ^ (row & 7)) << 4), mat, nrows, ncols, r0 + row,
                 c0 + ch * 8, vec);
    }
}

#ifndef KF_EMULATED_PTX
// a generic pointer into shared memory as a shared-window address
__device__ __forceinline__ unsigned kf_smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// orders this thread's earlier generic-proxy shared writes (cp.async included) before later reads
// by the async proxy (wgmma); each writing thread runs it before the barrier that publishes them
__device__ __forceinline__ void kf_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// before the first wgmma of a batch: the accumulator registers written by ordinary code are ready
__device__ __forceinline__ void kf_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void kf_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// until at most N of this warpgroup's committed batches are in flight
template <int N>
__device__ __forceinline__ void kf_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// pins R accumulator registers in place around a batch: the compiler may not move their reads or
// writes across it (a wgmma writes them long after the asm statement that names them has issued)
template <int R>
__device__ __forceinline__ void kf_wgmma_hold(float* d)
{
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// d (the N / 2 fp32 accumulators of a m64nN tile) += A (64 x 16) * B (16 x N), 16-bit operands
// (BF16: bf16, else fp16); TA = 0: A K-major, 1: M-major; TB = 0: B K-major, 1: N-major (the
// instruction's imm-trans-a and imm-trans-b).  Each N's register list is written out once.
#define KF_WGMMA_ASM(N, AB, REGS, IA, IB, IP, ITA, ITB, ...) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." AB "." AB " " REGS ", %" #IA ", %" #IB \
                 ", p, 1, 1, %" #ITA ", %" #ITB ";\n}\n" \
                 : __VA_ARGS__ : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB))

#define KF_WG_REGS_64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define KF_WG_OPS_64 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
template <int TA, int TB, bool BF16>
__device__ __forceinline__ void kf_wgmma_n64(float* d, unsigned long long da, unsigned long long db)
{
    if constexpr (BF16) {
        KF_WGMMA_ASM(64, "bf16", KF_WG_REGS_64, 32, 33, 34, 35, 36, KF_WG_OPS_64);
    } else {
        KF_WGMMA_ASM(64, "f16", KF_WG_REGS_64, 32, 33, 34, 35, 36, KF_WG_OPS_64);
    }
}

#define KF_WG_REGS_128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define KF_WG_OPS_128 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
template <int TA, int TB, bool BF16>
__device__ __forceinline__ void kf_wgmma_n128(float* d, unsigned long long da, unsigned long long db)
{
    if constexpr (BF16) {
        KF_WGMMA_ASM(128, "bf16", KF_WG_REGS_128, 64, 65, 66, 67, 68, KF_WG_OPS_128);
    } else {
        KF_WGMMA_ASM(128, "f16", KF_WG_REGS_128, 64, 65, 66, 67, 68, KF_WG_OPS_128);
    }
}

#define KF_WG_REGS_256 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define KF_WG_OPS_256 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
template <int TA, int TB, bool BF16>
__device__ __forceinline__ void kf_wgmma_n256(float* d, unsigned long long da, unsigned long long db)
{
    if constexpr (BF16) {
        KF_WGMMA_ASM(256, "bf16", KF_WG_REGS_256, 128, 129, 130, 131, 132, KF_WG_OPS_256);
    } else {
        KF_WGMMA_ASM(256, "f16", KF_WG_REGS_256, 128, 129, 130, 131, 132, KF_WG_OPS_256);
    }
}

// d (the N / 2 fp32 accumulators of a m64nN tile) = (scale_d ? d : 0) + A (64 x 8) * B (8 x N) with
// TF32 operands (the tensor cores read the top 19 bits of each 32-bit value).  A comes from
// registers, the warpgroup's m64k8 fragment -- warp w, lane l: a[0] = A[16 w + l / 4][l % 4],
// a[1] 8 rows below, a[2] 4 columns right, a[3] both (the mma.sync m16n8k8 A fragment, a warp per 16
// rows); B K-major from shared memory through its descriptor (TF32 wgmma has no transposed form).
#define KF_WGMMA_TF32_ASM(N, REGS, IA, IB, IP, ...) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " REGS ", " IA ", %" #IB ", p, 1, 1;\n}\n" \
                 : __VA_ARGS__ : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d))
template <int N>
__device__ __forceinline__ void kf_wgmma_tf32(float* d, const unsigned* a, unsigned long long db, int scale_d)
{
    static_assert(N == 64 || N == 128, "kf_wgmma_tf32: N is 64 or 128");
    if constexpr (N == 128) {
        KF_WGMMA_TF32_ASM(128, KF_WG_REGS_128, "{%64, %65, %66, %67}", 68, 69, KF_WG_OPS_128);
    } else {
        KF_WGMMA_TF32_ASM(64, KF_WG_REGS_64, "{%32, %33, %34, %35}", 36, 37, KF_WG_OPS_64);
    }
}
// pins R 32-bit registers (a wgmma's A fragment) until here: the wgmma reads them long after the
// asm statement that names them has issued
template <int R>
__device__ __forceinline__ void kf_wgmma_hold_u(unsigned* r)
{
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+r"(r[i]) :: "memory");
}
#endif

// The stages of the library's wgmma GEMMs start at the first 1024-byte boundary (the swizzle's
// period) of the dynamic shared memory at smem (1024 bytes more than the stages are asked for).
__device__ __forceinline__ unsigned char* kf_wg_stages(void* smem)
{
    return static_cast<unsigned char*>(smem) + ((1024u - (kf_smem_u32(smem) & 1023u)) & 1023u);
}

// The main loop of the library's wgmma GEMMs (gemm/gemm_f16_wgmma, gemm/gemm_f16_wg): WGS_
// warpgroups, warpgroup g owning MT_ stacked 64 x BN_ tiles of the block (acc, BN_ / 2 fp32 each),
// k in ntiles slices of 64 through STAGES_ stages of A (64 MT_ WGS_ rows) and B (BN_ columns) at the
// shared addresses as_addr and bs_addr, filled by load_tile(slice, stage) (cp.async copies, one
// commit by this loop).  Per slice: one cp.async wait, the proxy fence (wgmma reads through the
// async proxy what cp.async wrote through the generic one), one barrier, the slice's 4 MT_ wgmmas as
// one batch; INFLIGHT_ batches stay in flight across the next barrier, so a stage is refilled only
// once the batch that read it has retired: copies run STAGES_ - 1 - INFLIGHT_ slices ahead.
// TA / TB: A M-major / B N-major (else K-major), each 64-row (or 64-column) piece 8192 bytes apart.
template <int BN_, int MT_, int WGS_, int STAGES_, int INFLIGHT_, int TA, int TB, bool BF16, typename LoadTile>
__device__ __forceinline__ void kf_wg_mainloop(float (&acc)[MT_][BN_ / 2], unsigned as_addr, unsigned bs_addr,
                                               int ntiles, LoadTile load_tile)
{
    constexpr int A_BYTES = 64 * MT_ * WGS_ * 128, B_BYTES = 64 * BN_ * 2, R = BN_ / 2;
    constexpr int AHEAD = STAGES_ - 1 - INFLIGHT_;          // slices in flight ahead of the math
    static_assert(AHEAD >= 1, "STAGES >= 2 + INFLIGHT");
    const int wg = threadIdx.x / 128;
#pragma unroll
    for (int t = 0; t < MT_; ++t) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
            acc[t][i] = 0.0f;
        }
    }
    // prologue: AHEAD slices in flight (a group is committed even when empty, so that the wait
    // counts the same in every iteration)
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < ntiles) {
            load_tile(s, s);
        }
        kf_cp_async_commit();
    }
#pragma unroll 1
    for (int tile = 0; tile < ntiles; ++tile) {
        kf_cp_async_wait<AHEAD - 1>();         // slice `tile` has landed (this thread's copies) ...
        kf_fence_proxy_async();                // ... is visible to the tensor cores' reads ...
        __syncthreads();                       // ... and so is everyone's; every batch before
                                               // tile - INFLIGHT has retired: its stage is free
        const int s = tile % STAGES_;
        const unsigned a_stage = as_addr + s * A_BYTES + wg * (MT_ * 8192);
        const unsigned b_stage = bs_addr + s * B_BYTES;
#pragma unroll
        for (int t = 0; t < MT_; ++t) {
            kf_wgmma_hold<R>(acc[t]);
        }
        kf_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            // the next 16 of k: 16 rows of 128 bytes down an MN-major block, 32 bytes along a K-major row
            const unsigned long long db = TB ? kf_wgmma_desc(b_stage + kk * 2048, 8192, 1024)
                                             : kf_wgmma_desc(b_stage + kk * 32, 16, 1024);
#pragma unroll
            for (int t = 0; t < MT_; ++t) {
                const unsigned long long da = TA ? kf_wgmma_desc(a_stage + t * 8192 + kk * 2048, 8192, 1024)
                                                 : kf_wgmma_desc(a_stage + t * 8192 + kk * 32, 16, 1024);
                if constexpr (BN_ == 256) {
                    kf_wgmma_n256<TA, TB, BF16>(acc[t], da, db);
                } else if constexpr (BN_ == 128) {
                    kf_wgmma_n128<TA, TB, BF16>(acc[t], da, db);
                } else {
                    kf_wgmma_n64<TA, TB, BF16>(acc[t], da, db);
                }
            }
        }
        kf_wgmma_commit();
#pragma unroll
        for (int t = 0; t < MT_; ++t) {
            kf_wgmma_hold<R>(acc[t]);
        }
        // refill the stage of slice tile - 1 - INFLIGHT, whose batch retired before the barrier
        const int next = tile + AHEAD;
        if (next < ntiles) {
            load_tile(next, next % STAGES_);
        }
        kf_cp_async_commit();
        kf_wgmma_wait<INFLIGHT_>();
    }
    kf_wgmma_wait<0>();
#pragma unroll
    for (int t = 0; t < MT_; ++t) {
        kf_wgmma_hold<R>(acc[t]);
    }
}
