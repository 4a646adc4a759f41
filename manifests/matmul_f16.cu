// matmul_f16: row-major C[m, n] = A[m, k] @ B[k, n], float16 A, B and C, float32 accumulation.
// Naive initial kernel: one thread per output element, a plain loop over k, no shared memory and
// no tensor cores; launched with the manifest's block = [16, 16], grid = [cdiv(n, 16), cdiv(m, 16)].
#include <cuda_fp16.h>

extern "C" __global__ void matmul_f16(const __half* a, const __half* b, __half* c, int m, int n, int k)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) {
        return;
    }
    const __half* arow = a + (size_t)row * k;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) {
        acc += __half2float(arow[p]) * __half2float(b[(size_t)p * n + col]);
    }
    c[(size_t)row * n + col] = __float2half_rn(acc);
}
