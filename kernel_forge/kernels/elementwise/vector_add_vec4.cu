// vector_add, one-shot float4 kernel: every thread owns ITEMS float4 vectors, laid out so that a
// warp touches consecutive 16-byte vectors on each of its ITEMS loads (fully coalesced); the
// grid covers cdiv(n, 4) vectors exactly once.  The 0-3 elements past the last whole vector
// (n % 4) are done with scalar loads by the first threads of the last block.  Buffers are >= 256-byte aligned and
// every vector starts at an element index that is a multiple of 4, so float4 accesses are
// aligned.  STREAM = 1 uses evict-first cache hints (__ldcs/__stcs): the data is touched once.
// kforge: grid = [cdiv(n, 4 * BLOCK * ITEMS), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune ITEMS = [2, 1, 4, 8]
// kforge: tune STREAM = [1, 0]
// kforge: constraint BLOCK <= 1024 and BLOCK % 32 == 0
// kforge: constraint BLOCK * ITEMS <= 4096

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
#ifndef STREAM
#define STREAM 1
#endif

#if STREAM
#define LD4(p) __ldcs(p)
#define ST4(p, v) __stcs(p, v)
#else
#define LD4(p) __ldg(p)
#define ST4(p, v) (*(p) = (v))
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
vector_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n)
{
    const int nvec = n >> 2;                       // whole float4 vectors
    const float4* __restrict__ a4 = reinterpret_cast<const float4*>(a);
    const float4* __restrict__ b4 = reinterpret_cast<const float4*>(b);
    float4* __restrict__ c4 = reinterpret_cast<float4*>(c);
    // first vector of this thread; its ITEMS vectors are BLOCK apart
    const int base = blockIdx.x * (BLOCK * ITEMS) + threadIdx.x;

    float4 va[ITEMS], vb[ITEMS];
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int v = base + j * BLOCK;
        va[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        vb[j] = va[j];
        if (v < nvec) {
            va[j] = LD4(a4 + v);
            vb[j] = LD4(b4 + v);
        }
    }
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        const int v = base + j * BLOCK;
        if (v < nvec) {
            ST4(c4 + v, make_float4(va[j].x + vb[j].x, va[j].y + vb[j].y,
                                    va[j].z + vb[j].z, va[j].w + vb[j].w));
        }
    }
    // scalar tail: elements 4*nvec .. n-1 (at most 3), one per thread of the last block
    if (blockIdx.x == gridDim.x - 1) {
        const int i = nvec * 4 + (int)threadIdx.x;
        if (i < n) {
            c[i] = a[i] + b[i];
        }
    }
}
