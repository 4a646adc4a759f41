// vector_add -- expert pattern elementwise_vec: an elementwise map with 16-byte accesses and
// several independent loads in flight per thread.  Each thread owns VPT float4 slots spaced a
// block apart (a warp touches 512 contiguous bytes per slot: fully coalesced), issues all its
// loads before any store (evict-first hints when STREAM: each byte is touched once), and the grid
// covers the float4 slots once (no grid-stride loop: no loop overhead, one wave for the sizes
// here).  The n % 4 elements past the last whole float4 are done one by one by the last block.
// The buffers are >= 256-byte aligned and every slot starts at a multiple of 4 elements.
// For another elementwise op, change op() and the argument list.
// kforge: grid = [max(1, cdiv(n, 4 * BLOCK * VPT)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune VPT = [4, 2, 1, 8]
// kforge: tune STREAM = [1, 0]
// kforge: constraint BLOCK * VPT <= 4096

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VPT
#define VPT 4
#endif
#ifndef STREAM
#define STREAM 1
#endif

#if STREAM
#define LD(p) __ldcs(p)
#define ST(p, v) __stcs(p, v)
#else
#define LD(p) __ldg(p)
#define ST(p, v) (*(p) = (v))
#endif

__device__ __forceinline__ float op(float a, float b)
{
    return a + b;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
vector_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n)
{
    const int nvec = n >> 2;
    const float4* __restrict__ a4 = reinterpret_cast<const float4*>(a);
    const float4* __restrict__ b4 = reinterpret_cast<const float4*>(b);
    float4* __restrict__ c4 = reinterpret_cast<float4*>(c);
    const int first = blockIdx.x * (BLOCK * VPT) + threadIdx.x;

    float4 va[VPT], vb[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
        const int s = first + j * BLOCK;
        if (s < nvec) {
            va[j] = LD(a4 + s);
            vb[j] = LD(b4 + s);
        }
    }
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
        const int s = first + j * BLOCK;
        if (s < nvec) {
            ST(c4 + s, make_float4(op(va[j].x, vb[j].x), op(va[j].y, vb[j].y), op(va[j].z, vb[j].z),
                                   op(va[j].w, vb[j].w)));
        }
    }
    if (blockIdx.x == gridDim.x - 1) {
        const int i = nvec * 4 + (int)threadIdx.x;
        if (i < n) {
            c[i] = op(a[i], b[i]);
        }
    }
}
