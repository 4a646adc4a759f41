// gelu_bf16: y = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) elementwise, with
// bfloat16 storage and float32 arithmetic.
// Naive initial kernel: one element per thread; launched with the manifest's
// grid = [cdiv(n, 256)], block = [256].
#include <cuda_bf16.h>

extern "C" __global__ void gelu_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, int n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float sqrt_2_over_pi = 0.7978845608028654f;
        float v = __bfloat162float(x[i]);
        float u = sqrt_2_over_pi * (v + 0.044715f * v * v * v);
        y[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(u)));
    }
}
