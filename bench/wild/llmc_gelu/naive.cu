// Ported from https://github.com/karpathy/llm.c (MIT), dev/cuda/gelu_forward.cu at commit f1e2ace65149:
// gelu_forward_kernel1 in llm.c's fp32 build (floatX = float), block_size 128.
typedef float floatX;
#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

extern "C" __global__ void gelu_forward(float* out, const float* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float xi = inp[i];
        float cube = 0.044715f * xi * xi * xi;
        out[i] = 0.5f * xi * (1.0f + tanhf(GELU_SCALING_FACTOR * (xi + cube)));
    }
}
