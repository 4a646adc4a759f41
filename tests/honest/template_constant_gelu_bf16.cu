// task: gelu_bf16
// covers: template, launch_bounds, constant, static_helper, vector_loads
// note: a templated body (VEC bf16 per thread, 16-byte loads and stores for VEC = 8), a __constant__
// note: table of the tanh approximation's coefficients, a static __device__ helper and
// note: __launch_bounds__; the tail (n not a multiple of VEC) is done element by element.
// kforge: grid = [cdiv(n, 256 * 8)]
// kforge: block = [256]
#include <cuda_bf16.h>

__constant__ float c_gelu[3] = {0.5f, 0.7978845608028654f, 0.044715f};

static __device__ __forceinline__ float gelu(float v)
{
    const float u = c_gelu[1] * (v + c_gelu[2] * v * v * v);
    return c_gelu[0] * v * (1.0f + tanhf(u));
}

template <int VEC>
__device__ __forceinline__ void gelu_vec(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int n)
{
    static_assert(VEC == 8, "16-byte accesses hold 8 bf16");
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        uint4 raw = *reinterpret_cast<const uint4*>(x + i);
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
        for (int k = 0; k < VEC / 2; ++k) {
            const float2 f = __bfloat1622float2(h[k]);
            h[k] = __floats2bfloat162_rn(gelu(f.x), gelu(f.y));
        }
        *reinterpret_cast<uint4*>(y + i) = raw;
    } else {
        for (long long k = i; k < n; ++k) {
            y[k] = __float2bfloat16(gelu(__bfloat162float(x[k])));
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) gelu_bf16(const __nv_bfloat16* __restrict__ x,
                                                            __nv_bfloat16* __restrict__ y, int n)
{
    gelu_vec<8>(x, y, n);
}
