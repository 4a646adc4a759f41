// matmul_f32: shared-memory tiled SGEMM with register blocking and double buffering.
// A block computes a BM x BN tile of C with THREADS = (BM/TM) * (BN/TN) threads; each thread
// owns a TM x TN micro-tile held in registers, split into 4-wide groups spaced 4*TY rows /
// 4*TX columns apart so the float4 shared-memory reads of a quarter-warp are contiguous
// (conflict-free).  Per k-step of BK: the next A/B tiles are fetched from global memory into
// registers while the current shared-memory stage is multiplied, then stored to the other
// stage (one __syncthreads per k-step).  A is stored transposed (As[k][m], padded by 4) so the
// TM values a thread needs for one k are float4-contiguous.
// Edges: every global load is bounds-checked (zero fill outside m, n, k), every store is
// bounds-checked.  float4 global loads/stores are used only where they are aligned: A when
// k % 4 == 0, B and C when n % 4 == 0 (tile origins and in-tile offsets are multiples of 4 and
// the buffers are >= 256-byte aligned); otherwise the same elements are moved one by one.
// Pure FP32 FFMA accumulation (no TF32), k summed in order: deterministic.
// kforge: grid = [cdiv(n, BN), cdiv(m, BM), 1]
// kforge: block = [(BM // TM) * (BN // TN), 1, 1]
// kforge: tune BM = [128, 32, 64]
// kforge: tune BN = [128, 32, 64]
// kforge: tune BK = [8, 16, 32]
// kforge: tune TM = [8, 4]
// kforge: tune TN = [8, 4]
// kforge: tune MINB = [1, 2]
// kforge: constraint (BM // TM) * (BN // TN) >= 64 and (BM // TM) * (BN // TN) <= 512
// kforge: constraint (BM * BK) % (4 * (BM // TM) * (BN // TN)) == 0
// kforge: constraint (BN * BK) % (4 * (BM // TM) * (BN // TN)) == 0
// kforge: constraint MINB == 1 or (BM // TM) * (BN // TN) == 256
// kforge: constraint 2 * 4 * BK * (BM + 4 + BN) <= 49152

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef MINB
#define MINB 1            // __launch_bounds__ min blocks per SM (2 caps 256-thread blocks at 128 registers)
#endif

#define TX (BN / TN)                 // threads along n
#define TY (BM / TM)                 // threads along m
#define THREADS (TX * TY)
#define APAD 4
#define A_LOADS (BM * BK / 4 / THREADS)   // float4 slots of the A tile per thread
#define B_LOADS (BN * BK / 4 / THREADS)   // float4 slots of the B tile per thread

#if (TM % 4) || (TN % 4) || (BK % 4)
#error "TM, TN and BK must be multiples of 4"
#endif
#if (BM * BK) % (4 * THREADS) || (BN * BK) % (4 * THREADS)
#error "tile loads must divide evenly among the threads"
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
           int m, int n, int k)
{
    __shared__ __align__(16) float As[2][BK][BM + APAD];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % TX;
    const int ty = tid / TX;
    const int bm = blockIdx.y * BM;
    const int bn = blockIdx.x * BN;
    const bool a_vec = (k & 3) == 0;
    const bool bc_vec = (n & 3) == 0;

    float4 ra[A_LOADS];
    float4 rb[B_LOADS];

    // global -> registers for the k-tile starting at k0 (zero outside the matrices)
    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int row = bm + f / (BK / 4);
            const int col = k0 + (f % (BK / 4)) * 4;
            const float* p = a + (size_t)row * k + col;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row < m) {
                if (a_vec) {
                    if (col < k) v = *reinterpret_cast<const float4*>(p);
                } else {
                    if (col + 0 < k) v.x = p[0];
                    if (col + 1 < k) v.y = p[1];
                    if (col + 2 < k) v.z = p[2];
                    if (col + 3 < k) v.w = p[3];
                }
            }
            ra[i] = v;
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int row = k0 + f / (BN / 4);
            const int col = bn + (f % (BN / 4)) * 4;
            const float* p = b + (size_t)row * n + col;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row < k) {
                if (bc_vec) {
                    if (col < n) v = *reinterpret_cast<const float4*>(p);
                } else {
                    if (col + 0 < n) v.x = p[0];
                    if (col + 1 < n) v.y = p[1];
                    if (col + 2 < n) v.z = p[2];
                    if (col + 3 < n) v.w = p[3];
                }
            }
            rb[i] = v;
        }
    };
    // registers -> shared stage s
    auto stash = [&](int s) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int r = f / (BK / 4);
            const int cc = (f % (BK / 4)) * 4;
            As[s][cc + 0][r] = ra[i].x;
            As[s][cc + 1][r] = ra[i].y;
            As[s][cc + 2][r] = ra[i].z;
            As[s][cc + 3][r] = ra[i].w;
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            const int f = tid + i * THREADS;
            const int r = f / (BN / 4);
            const int cc = (f % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[s][r][cc]) = rb[i];
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

    for (int t = 0; t < ntiles; ++t) {
        const int s = t & 1;
        const bool more = t + 1 < ntiles;
        if (more) {
            fetch((t + 1) * BK);
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float fa[TM], fb[TN];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) {
                const float4 v = *reinterpret_cast<const float4*>(&As[s][kk][g * TY * 4 + ty * 4]);
                fa[g * 4 + 0] = v.x;
                fa[g * 4 + 1] = v.y;
                fa[g * 4 + 2] = v.z;
                fa[g * 4 + 3] = v.w;
            }
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[s][kk][g * TX * 4 + tx * 4]);
                fb[g * 4 + 0] = v.x;
                fb[g * 4 + 1] = v.y;
                fb[g * 4 + 2] = v.z;
                fb[g * 4 + 3] = v.w;
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
            // stage s ^ 1 was last read in iteration t - 1, which every thread finished
            // before the barrier that ended it
            stash(s ^ 1);
        }
        __syncthreads();
    }

    // epilogue: rows bm + g*4*TY + ty*4 + e, columns bn + h*4*TX + tx*4 + (0..3)
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = bm + (i / 4) * TY * 4 + ty * 4 + (i % 4);
        if (row >= m) {
            continue;
        }
        float* crow = c + (size_t)row * n;
#pragma unroll
        for (int h = 0; h < TN / 4; ++h) {
            const int col = bn + h * TX * 4 + tx * 4;
            if (bc_vec) {
                if (col < n) {
                    *reinterpret_cast<float4*>(crow + col) =
                        make_float4(acc[i][h * 4 + 0], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
                }
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (col + e < n) {
                        crow[col + e] = acc[i][h * 4 + e];
                    }
                }
            }
        }
    }
}
