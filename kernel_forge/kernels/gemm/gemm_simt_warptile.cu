// matmul_f32 -- expert pattern gemm_simt_warptile: a warp-tiled SIMT SGEMM (FP32 FFMA, no TF32).
// Tiling: a block computes a BM x BN tile of C; its WARPS_M x WARPS_N warps each own a WM x WN
// warp tile; a warp's 32 lanes form an LM x LN grid (LM = WM / TM, LN = WN / TN, LM * LN = 32)
// and each lane owns TM x TN outputs as (TM/4) x (TN/4) sub-tiles of 4 x 4, spaced LM*4 rows and
// LN*4 columns apart.  So every fragment a lane reads from shared memory is 4 contiguous floats,
// one LDS.128, and a quarter-warp reads contiguous or identical addresses (no bank conflicts):
// per k, TM/4 + TN/4 LDS.128 feed TM * TN FFMA (8 x 8: 4 LDS.128 per 64 FFMA).
// Pipeline: the next BK-slice of A and B is loaded from global memory into registers (float4,
// LDG.128) while the current slice is multiplied out of shared memory; then it is stored to the
// other shared stage (double buffering: one __syncthreads per BK).  A is stored transposed,
// As[k][m], so a lane's 4 rows of A at one k are contiguous; the A loads walk 32 consecutive
// rows per warp, so the 4-byte transposing stores of a warp hit 32 distinct banks.
// Edges: loads are zero-filled outside m, n, k and every store is checked, so any m, n, k work
// (k = 1, one row); float4 global accesses only where aligned (A: k % 4 == 0; B and C:
// n % 4 == 0; the buffers are >= 256-byte aligned), the same elements one by one otherwise.
// k is summed in order by one thread per output: deterministic.
// kforge: grid = [cdiv(n, BN), cdiv(m, BM), 1]
// kforge: block = [32 * (BM // WM) * (BN // WN), 1, 1]
// kforge: tune BM = [128, 64, 32, 256]
// kforge: tune BN = [128, 64, 32, 256]
// kforge: tune BK = [8, 16, 32]
// kforge: tune WM = [32, 64, 16]
// kforge: tune WN = [64, 32, 16]
// kforge: tune TM = [8, 4]
// kforge: tune TN = [8, 4, 16]
// kforge: tune MINB = [2, 1]
// kforge: constraint (WM // TM) * (WN // TN) == 32 and WM % TM == 0 and WN % TN == 0
// kforge: constraint BM % WM == 0 and BN % WN == 0
// kforge: constraint (BM // WM) * (BN // WN) >= 2 and (BM // WM) * (BN // WN) <= 16
// kforge: constraint (BM * BK) % (128 * (BM // WM) * (BN // WN)) == 0
// kforge: constraint (BN * BK) % (128 * (BM // WM) * (BN // WN)) == 0
// kforge: constraint 8 * BK * (BM + BN) <= 49152
// kforge: constraint BK * (BM + BN) <= 1024 * (BM // WM) * (BN // WN)
// kforge: constraint (TM * TN + TM + TN + 37) * 32 * (BM // WM) * (BN // WN) * MINB + BK * (BM + BN) * MINB <= 65536
// kforge: constraint (TM * TN + TM + TN + 37) * 32 * (BM // WM) * (BN // WN) + BK * (BM + BN) <= 255 * 32 * (BM // WM) * (BN // WN)

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef WM
#define WM 32
#endif
#ifndef WN
#define WN 64
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef MINB
#define MINB 2            // __launch_bounds__ min blocks per SM: 2 x 256 threads caps registers at 128
#endif

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define THREADS (32 * WARPS_M * WARPS_N)
#define LM (WM / TM)                      // lanes along m
#define LN (WN / TN)                      // lanes along n
#define KQ (BK / 4)                       // float4 per row of the A tile
#define NQ (BN / 4)                       // float4 per row of the B tile
#define A_LOADS (BM * KQ / THREADS)       // float4 of the A tile per thread
#define B_LOADS (BK * NQ / THREADS)       // float4 of the B tile per thread

#if LM * LN != 32
#error "a warp tile must hold exactly 32 lanes: (WM / TM) * (WN / TN) == 32"
#endif
#if (TM % 4) || (TN % 4) || (BK % 4) || (BM % 32)
#error "TM, TN and BK must be multiples of 4, BM of 32"
#endif
#if (BM * KQ) % THREADS || (BK * NQ) % THREADS
#error "tile loads must divide evenly among the threads"
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
           int m, int n, int k)
{
    __shared__ __align__(16) float As[2][BK][BM];   // A transposed: As[s][kk][row]
    __shared__ __align__(16) float Bs[2][BK][BN];   // Bs[s][kk][col]

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int bm = blockIdx.y * BM;
    const int bn = blockIdx.x * BN;
    const bool a_vec = (k & 3) == 0;
    const bool bc_vec = (n & 3) == 0;

    // this lane's first fragment offsets inside the shared tiles
    const int a_frag = (warp / WARPS_N) * WM + (lane / LN) * 4;
    const int b_frag = (warp % WARPS_N) * WN + (lane % LN) * 4;

    float4 ra[A_LOADS];
    float4 rb[B_LOADS];

    // global -> registers, the k-slice starting at k0 (zero outside the matrices).
    // A: slot f covers row f % BM (consecutive lanes, consecutive rows), columns 4 * (f / BM) + 0..3
    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int row = bm + f % BM;
            const int col = k0 + (f / BM) * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row < m) {
                const float* p = a + (size_t)row * k + col;
                if (a_vec) {
                    if (col < k) v = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    if (col + 0 < k) v.x = __ldg(p + 0);
                    if (col + 1 < k) v.y = __ldg(p + 1);
                    if (col + 2 < k) v.z = __ldg(p + 2);
                    if (col + 3 < k) v.w = __ldg(p + 3);
                }
            }
            ra[i] = v;
        }
        // B: slot f covers row f / NQ, columns 4 * (f % NQ) + 0..3 (a warp reads contiguous bytes)
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int row = k0 + f / NQ;
            const int col = bn + (f % NQ) * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row < k) {
                const float* p = b + (size_t)row * n + col;
                if (bc_vec) {
                    if (col < n) v = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    if (col + 0 < n) v.x = __ldg(p + 0);
                    if (col + 1 < n) v.y = __ldg(p + 1);
                    if (col + 2 < n) v.z = __ldg(p + 2);
                    if (col + 3 < n) v.w = __ldg(p + 3);
                }
            }
            rb[i] = v;
        }
    };
    // registers -> shared stage s (A transposed with four 4-byte stores, B with one 16-byte store)
    auto stash = [&](int s) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int r = f % BM;
            const int q = (f / BM) * 4;
            As[s][q + 0][r] = ra[i].x;
            As[s][q + 1][r] = ra[i].y;
            As[s][q + 2][r] = ra[i].z;
            As[s][q + 3][r] = ra[i].w;
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int f = tid + i * THREADS;
            *reinterpret_cast<float4*>(&Bs[s][f / NQ][(f % NQ) * 4]) = rb[i];
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    const int ntiles = (k + BK - 1) / BK;
    fetch(0);
    stash(0);
    __syncthreads();

#pragma unroll 1
    for (int t = 0; t < ntiles; ++t) {
        const int s = t & 1;
        const bool more = t + 1 < ntiles;
        if (more) {
            fetch((t + 1) * BK);          // in flight while this slice is multiplied
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float fa[TM], fb[TN];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) {
                const float4 v = *reinterpret_cast<const float4*>(&As[s][kk][a_frag + g * LM * 4]);
                fa[4 * g + 0] = v.x;
                fa[4 * g + 1] = v.y;
                fa[4 * g + 2] = v.z;
                fa[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[s][kk][b_frag + g * LN * 4]);
                fb[4 * g + 0] = v.x;
                fb[4 * g + 1] = v.y;
                fb[4 * g + 2] = v.z;
                fb[4 * g + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
                }
            }
        }
        if (more) {
            // stage s ^ 1 was last read in iteration t - 1, finished by every thread before the
            // barrier that ended it
            stash(s ^ 1);
        }
        __syncthreads();
    }

    // epilogue: acc[4g + r][4h + e] is C[row0 + g*LM*4 + r][col0 + h*LN*4 + e]
    const int row0 = bm + a_frag;
    const int col0 = bn + b_frag;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i / 4) * LM * 4 + (i % 4);
        if (row >= m) {
            continue;
        }
        float* crow = c + (size_t)row * n;
#pragma unroll
        for (int h = 0; h < TN / 4; ++h) {
            const int col = col0 + h * LN * 4;
            if (bc_vec) {
                if (col < n) {
                    *reinterpret_cast<float4*>(crow + col) =
                        make_float4(acc[i][4 * h + 0], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
                }
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (col + e < n) {
                        crow[col + e] = acc[i][4 * h + e];
                    }
                }
            }
        }
    }
}
