"""A template kernel written as serving code writes them, shared by the tests of template instances
(tests/model/test_template_instance.py) and of the derived search space (tests/search/test_own_space.py)."""

#: written as serving code writes kernels: a forward declaration, attributes from template
#: parameters, a templated helper, a default argument
RMS = """#include <cuda_fp16.h>
// kforge: instance rms_norm_kernel<__half, BLOCK>
template <typename T> __device__ __forceinline__ float to_f(T v) { return (float)v; }

template <typename scalar_t, int THREADS, bool ADD_ONE = false>
__global__ void rms_norm_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                                const float epsilon, const int hidden_size);

template <typename scalar_t, int THREADS, bool ADD_ONE>
__global__ void __launch_bounds__(THREADS)
rms_norm_kernel(scalar_t* __restrict__ out,            // [tokens, hidden]
                const scalar_t* __restrict__ input,    // [tokens, hidden]
                const float epsilon, const int hidden_size)
{
    __shared__ float red[THREADS];
    float v = 0.0f;
    for (int i = threadIdx.x; i < hidden_size; i += THREADS) {
        const float x = to_f(input[blockIdx.x * hidden_size + i]);
        v += x * x;
    }
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float r = rsqrtf(red[0] / hidden_size + epsilon) + (ADD_ONE ? 1.0f : 0.0f);
    for (int i = threadIdx.x; i < hidden_size; i += THREADS)
        out[blockIdx.x * hidden_size + i] = (scalar_t)(to_f(input[blockIdx.x * hidden_size + i]) * r);
}
"""
