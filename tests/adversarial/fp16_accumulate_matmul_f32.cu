// task: matmul_f32
// expect: mismatch
// note: precision downgrade: rounds A and B to fp16 and accumulates the dot product in __half.
// note: With k = 29 normal inputs the sums reach a few units, where fp16 steps are ~4e-3, far
// note: beyond atol 1e-3 + rtol 1e-4: mismatch on case "odd" (every element written).
#include <cuda_fp16.h>

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) {
        return;
    }
    const float* arow = a + (size_t)row * k;
    __half acc = __float2half(0.0f);
    for (int p = 0; p < k; ++p) {
        acc = __hfma(__float2half(arow[p]), __float2half(b[(size_t)p * n + col]), acc);
    }
    c[(size_t)row * n + col] = __half2float(acc);
}
