// task: matmul_f32
// covers: template, launch_bounds
// note: a templated register-blocked SGEMM (BM x BN tile per 256-thread block, BK-deep shared
// note: tiles, TM x TN outputs per thread), instantiated at <64, 64, 16, 4, 4>; loads guarded and
// note: zero-filled at the edges, so every m, n, k works.
// kforge: grid = [cdiv(n, 64), cdiv(m, 64)]
// kforge: block = [256]

template <int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                      int m, int n, int k)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    static_assert(THREADS == 256, "one thread per TM x TN outputs of a 256-thread block");
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
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
        for (int e = tid; e < BM * BK; e += THREADS) {
            const int r = e / BK, c = e % BK;
            const int gr = row0 + r, gc = k0 + c;
            As[c][r] = (gr < m && gc < k) ? A[(long long)gr * k + gc] : 0.0f;
        }
        for (int e = tid; e < BK * BN; e += THREADS) {
            const int r = e / BN, c = e % BN;
            const int gr = k0 + r, gc = col0 + c;
            Bs[r][c] = (gr < k && gc < n) ? B[(long long)gr * n + gc] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx * TN + j];
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
            if (r < m && c < n) {
                C[(long long)r * n + c] = acc[i][j];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 2) matmul_f32(const float* a, const float* b, float* c,
                                                                int m, int n, int k)
{
    sgemm<64, 64, 16, 4, 4>(a, b, c, m, n, k);
}
