// task: matmul_f32
// covers: dynamic_smem_above_48k, launch_bounds
// note: 128 x 128 output tiles with 64-deep A and B tiles in 64 KB of dynamic shared memory (above
// note: the 48 KB default in every case: the gate must opt in), 8 x 8 outputs per thread of a
// note: 256-thread block; edges zero-filled.
// kforge: grid = [cdiv(n, 128), cdiv(m, 128)]
// kforge: block = [256]
// kforge: shared_mem = 65536
#define BM 128
#define BN 128
#define BK 64
#define TM 8
#define TN 8

extern "C" __global__ void __launch_bounds__(256, 1) matmul_f32(const float* __restrict__ A, const float* __restrict__ B,
                                                                float* __restrict__ C, int m, int n, int k)
{
    extern __shared__ float smem[];
    float* As = smem;                  // [BK][BM]
    float* Bs = smem + BK * BM;        // [BK][BN]
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += BK) {
        for (int e = tid; e < BM * BK; e += 256) {
            const int r = e / BK, c = e % BK;
            const int gr = row0 + r, gc = k0 + c;
            As[c * BM + r] = (gr < m && gc < k) ? A[(long long)gr * k + gc] : 0.0f;
        }
        for (int e = tid; e < BK * BN; e += 256) {
            const int r = e / BN, c = e % BN;
            const int gr = k0 + r, gc = col0 + c;
            Bs[r * BN + c] = (gr < k && gc < n) ? B[(long long)gr * n + gc] : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk * BM + ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[kk * BN + tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + tx * TN + j;
            if (r < m && c < n) C[(long long)r * n + c] = acc[i][j];
        }
    }
}
