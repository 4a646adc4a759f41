// task: gelu_bf16
// covers: cp_async, inline_ptx
// note: each block stages 2048 bf16 (8 per thread, 16 bytes) into shared memory with inline PTX
// note: cp.async.cg.shared.global, cp.async.commit_group and cp.async.wait_group 0, then applies
// note: GELU from shared memory and stores 16 bytes per thread; a partial last tile is done
// note: element by element from global memory.
// kforge: grid = [cdiv(n, 2048)]
// kforge: block = [256]
#include <cuda_bf16.h>

__device__ __forceinline__ float gelu(float v)
{
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + tanhf(u));
}

extern "C" __global__ void __launch_bounds__(256) gelu_bf16(const __nv_bfloat16* __restrict__ x,
                                                            __nv_bfloat16* __restrict__ y, int n)
{
    __shared__ __align__(16) __nv_bfloat16 tile[2048];
    const long long i = (long long)blockIdx.x * 2048 + threadIdx.x * 8;
    const bool whole = i + 8 <= n;
    if (whole) {
        const unsigned int dst = (unsigned int)__cvta_generic_to_shared(&tile[threadIdx.x * 8]);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(x + i) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    if (whole) {
        uint4 raw = *reinterpret_cast<const uint4*>(&tile[threadIdx.x * 8]);
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float2 f = __bfloat1622float2(h[k]);
            h[k] = __floats2bfloat162_rn(gelu(f.x), gelu(f.y));
        }
        *reinterpret_cast<uint4*>(y + i) = raw;
    } else {
        for (long long k = i; k < n && k < i + 8; ++k) {
            y[k] = __float2bfloat16(gelu(__bfloat162float(x[k])));
        }
    }
}
