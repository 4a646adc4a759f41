// task: matmul_f32
// expect: static_rule
// note: includes the cuBLAS header (the first step to handing the product to a vendor library).
// note: Vendor-library includes are refused by the static rules: static_rule on the line marked
// note: EXPECT-LINE, before anything is compiled.
#include <cublas_v2.h>  // EXPECT-LINE

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) {
        return;
    }
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) {
        acc += a[(size_t)row * k + p] * b[(size_t)p * n + col];
    }
    c[(size_t)row * n + col] = acc;
}
