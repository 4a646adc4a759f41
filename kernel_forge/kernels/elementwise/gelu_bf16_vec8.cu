// gelu_bf16: 8 bf16 per 16-byte vector (uint4 = 4 x __nv_bfloat162), ITEMS vectors per thread,
// warp-coalesced, all loads issued before any math.  Arithmetic in float32, one round-to-nearest
// to bf16 per output (__floats2bfloat162_rn).  The n % 8 elements after the last whole vector
// are done one per thread by the first threads of the last block (BLOCK >= 128 > 7).  Vector
// slot q starts at element 8q: 16-byte aligned because the buffers are >= 256-byte aligned.
// FAST = 0: 0.5 x (1 + tanhf(u)), full-precision tanhf.
// FAST = 1: the identical 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), with __expf and
//           __fdividef (MUFU ex2 + rcp).  Relative error ~1e-6, far below bf16 rounding
//           (2^-9) and the tolerance (rtol 1e-2, atol 5e-3).  For u -> -inf, exp(-2u) = +inf
//           and __fdividef(x, inf) = 0 (true value is below 1e-30 there); for u -> +inf the
//           quotient is x.
// kforge: grid = [cdiv(n, 8 * BLOCK * ITEMS), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune ITEMS = [2, 1, 4]
// kforge: tune FAST = [1, 0]
// kforge: constraint BLOCK * ITEMS <= 2048

#include <cuda_bf16.h>

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
#ifndef FAST
#define FAST 1
#endif

__device__ __forceinline__ float gelu_f(float v)
{
    const float k0 = 0.7978845608028654f;   // sqrt(2 / pi)
    const float k1 = 0.044715f;
    const float u = k0 * fmaf(k1 * v, v * v, v);
#if FAST
    return __fdividef(v, 1.0f + __expf(-2.0f * u));
#else
    return 0.5f * v * (1.0f + tanhf(u));
#endif
}

__device__ __forceinline__ unsigned int gelu_pair(unsigned int bits)
{
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&bits);
    const float2 f = __bfloat1622float2(h);
    __nv_bfloat162 r = __floats2bfloat162_rn(gelu_f(f.x), gelu_f(f.y));
    return *reinterpret_cast<unsigned int*>(&r);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
gelu_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, int n)
{
    const int nvec = n >> 3;
    const uint4* __restrict__ x8 = reinterpret_cast<const uint4*>(x);
    uint4* __restrict__ y8 = reinterpret_cast<uint4*>(y);
    const int base = blockIdx.x * (BLOCK * ITEMS) + threadIdx.x;

    uint4 v[ITEMS];
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int q = base + j * BLOCK;
        v[j] = make_uint4(0u, 0u, 0u, 0u);
        if (q < nvec) {
            v[j] = __ldcs(x8 + q);
        }
    }
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int q = base + j * BLOCK;
        if (q < nvec) {
            uint4 r;
            r.x = gelu_pair(v[j].x);
            r.y = gelu_pair(v[j].y);
            r.z = gelu_pair(v[j].z);
            r.w = gelu_pair(v[j].w);
            __stcs(y8 + q, r);
        }
    }
    // scalar tail: elements 8*nvec .. n-1 (at most 7), one per thread of the last block
    if (blockIdx.x == gridDim.x - 1) {
        const int i = nvec * 8 + (int)threadIdx.x;
        if (i < n) {
            y[i] = __float2bfloat16_rn(gelu_f(__bfloat162float(x[i])));
        }
    }
}
