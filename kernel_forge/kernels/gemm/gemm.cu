// kforge: grid = [cdiv(@@N@@, BN), cdiv(@@M@@, BM), @@BATCH@@]
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
// Bound pattern gemm (from gemm_simt_warptile): the warp-tiled SIMT SGEMM with an epilogue
// C = alpha * acc (+ beta * C) (+ bias[col]) for row-major A (m x k, or k x m when KF_TRANS_A) and
// B (k x n, or n x k when KF_TRANS_B: a linear layer's weight); a transposed operand is read
// along its rows with 16-byte loads and stored into the shared tile the other way round.
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

#define KF_THREADS THREADS, MINB

#include "kforge/gemm_epilogue.cuh"

__device__ __forceinline__ void kf_gemm(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                        int m, int n, int k, float alpha, float beta, const float* __restrict__ bias)
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
#if KF_TRANS_A
        // A stored k x m: slot f covers k-row f / (BM / 4), m-columns 4 * (f % (BM / 4)) + 0..3
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int row = k0 + f / (BM / 4);
            const int col = bm + (f % (BM / 4)) * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row < k) {
                const float* p = a + (size_t)row * m + col;
                if ((m & 3) == 0) {
                    if (col < m) v = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    if (col + 0 < m) v.x = __ldg(p + 0);
                    if (col + 1 < m) v.y = __ldg(p + 1);
                    if (col + 2 < m) v.z = __ldg(p + 2);
                    if (col + 3 < m) v.w = __ldg(p + 3);
                }
            }
            ra[i] = v;
        }
#else
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
#endif
#if KF_TRANS_B
        // B stored n x k: slot f covers n-row f % BN, k-columns 4 * (f / BN) + 0..3
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int row = bn + f % BN;
            const int col = k0 + (f / BN) * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row < n) {
                const float* p = b + (size_t)row * k + col;
                if (a_vec) {
                    if (col < k) v = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    if (col + 0 < k) v.x = __ldg(p + 0);
                    if (col + 1 < k) v.y = __ldg(p + 1);
                    if (col + 2 < k) v.z = __ldg(p + 2);
                    if (col + 3 < k) v.w = __ldg(p + 3);
                }
            }
            rb[i] = v;
        }
#else
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
#endif
    };
    // registers -> shared stage s (A transposed with four 4-byte stores, B with one 16-byte store)
    auto stash = [&](int s) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int f = tid + i * THREADS;
#if KF_TRANS_A
            *reinterpret_cast<float4*>(&As[s][f / (BM / 4)][(f % (BM / 4)) * 4]) = ra[i];
#else
            const int r = f % BM;
            const int q = (f / BM) * 4;
            As[s][q + 0][r] = ra[i].x;
            As[s][q + 1][r] = ra[i].y;
            As[s][q + 2][r] = ra[i].z;
            As[s][q + 3][r] = ra[i].w;
#endif
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int f = tid + i * THREADS;
#if KF_TRANS_B
            const int r = f % BN;
            const int q = (f / BN) * 4;
            Bs[s][q + 0][r] = rb[i].x;
            Bs[s][q + 1][r] = rb[i].y;
            Bs[s][q + 2][r] = rb[i].z;
            Bs[s][q + 3][r] = rb[i].w;
#else
            *reinterpret_cast<float4*>(&Bs[s][f / NQ][(f % NQ) * 4]) = rb[i];
#endif
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
                        make_float4(kf_epi_value(acc[i][4 * h + 0], crow, col + 0, alpha, beta, bias),
                                    kf_epi_value(acc[i][4 * h + 1], crow, col + 1, alpha, beta, bias),
                                    kf_epi_value(acc[i][4 * h + 2], crow, col + 2, alpha, beta, bias),
                                    kf_epi_value(acc[i][4 * h + 3], crow, col + 3, alpha, beta, bias));
                }
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (col + e < n) {
                        crow[col + e] = kf_epi_value(acc[i][4 * h + e], crow, col + e, alpha, beta, bias);
                    }
                }
            }
        }
    }
}
