// matmul_f32: classic TILE x TILE shared-memory tiling; block = TILE x (TILE / RPT) threads,
// each thread computes RPT outputs of one column (rows ty, ty + TILE/RPT, ...), reusing each
// B element from shared memory RPT times.  Small tiles suit the small performance cases
// (256^3 and 384x256x320 give many more blocks than 128x128 tiles would).  Every load is
// bounds-checked with zero fill (ragged m, n and k), every store is bounds-checked.  FP32 FFMA,
// k summed in order: deterministic.
// kforge: grid = [cdiv(n, TILE), cdiv(m, TILE), 1]
// kforge: block = [TILE, TILE // RPT, 1]
// kforge: tune TILE = [32, 16]
// kforge: tune RPT = [4, 1, 2, 8]
// kforge: constraint TILE * (TILE // RPT) >= 64
// kforge: constraint TILE * (TILE // RPT) <= 1024
// kforge: constraint TILE % RPT == 0

#ifndef TILE
#define TILE 32
#endif
#ifndef RPT
#define RPT 4
#endif

#define TYS (TILE / RPT)   // threads along y

extern "C" __global__ void __launch_bounds__(TILE * TYS)
matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
           int m, int n, int k)
{
    __shared__ float As[TILE][TILE + 1];   // As[row][kk]
    __shared__ float Bs[TILE][TILE];       // Bs[kk][col]
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int bm = blockIdx.y * TILE;
    const int bn = blockIdx.x * TILE;
    const int col = bn + tx;

    float acc[RPT];
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        acc[i] = 0.0f;
    }

    for (int k0 = 0; k0 < k; k0 += TILE) {
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const int r = ty + i * TYS;
            const int arow = bm + r;
            const int acol = k0 + tx;
            As[r][tx] = (arow < m && acol < k) ? a[(size_t)arow * k + acol] : 0.0f;
            const int brow = k0 + r;
            Bs[r][tx] = (brow < k && col < n) ? b[(size_t)brow * n + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            const float bv = Bs[kk][tx];
#pragma unroll
            for (int i = 0; i < RPT; ++i) {
                acc[i] = fmaf(As[ty + i * TYS][kk], bv, acc[i]);
            }
        }
        __syncthreads();
    }

    if (col < n) {
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const int row = bm + ty + i * TYS;
            if (row < m) {
                c[(size_t)row * n + col] = acc[i];
            }
        }
    }
}
