// vector_add, persistent grid-stride float4 kernel: a fixed grid of 132 * BLOCKS_PER_SM blocks
// (H200 has 132 SMs; capped by the work so tiny inputs launch few blocks) walks the float4
// vectors with a stride of the whole grid, UNROLL vectors per iteration with all loads issued
// before the stores.  Vectors left after the unrolled loop go one at a time; the 0-3 elements
// past the last whole vector (n % 4) are done with scalar loads by the first threads of the grid.
// kforge: grid = [max(1, min(132 * BLOCKS_PER_SM, cdiv(n, 4 * BLOCK * UNROLL))), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune UNROLL = [4, 1, 2, 8]
// kforge: tune BLOCKS_PER_SM = [4, 2, 8, 16]
// kforge: constraint BLOCK * BLOCKS_PER_SM <= 2048
// kforge: constraint BLOCK * BLOCKS_PER_SM >= 512
// kforge: constraint BLOCK * UNROLL <= 4096

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 4
#endif

extern "C" __global__ void __launch_bounds__(BLOCK)
vector_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n)
{
    const long long nvec = n >> 2;
    const float4* __restrict__ a4 = reinterpret_cast<const float4*>(a);
    const float4* __restrict__ b4 = reinterpret_cast<const float4*>(b);
    float4* __restrict__ c4 = reinterpret_cast<float4*>(c);
    const long long tid = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * BLOCK;

    long long v = tid;
    // unrolled body: all UNROLL vectors v, v + nthreads, ... are in range
    for (; v + (UNROLL - 1) * nthreads < nvec; v += UNROLL * nthreads) {
        float4 va[UNROLL], vb[UNROLL];
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            va[j] = __ldcs(a4 + v + j * nthreads);
            vb[j] = __ldcs(b4 + v + j * nthreads);
        }
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            float4 r;
            r.x = va[j].x + vb[j].x;
            r.y = va[j].y + vb[j].y;
            r.z = va[j].z + vb[j].z;
            r.w = va[j].w + vb[j].w;
            __stcs(c4 + v + j * nthreads, r);
        }
    }
    // remainder: fewer than UNROLL vectors for this thread
    for (; v < nvec; v += nthreads) {
        const float4 x = __ldcs(a4 + v);
        const float4 y = __ldcs(b4 + v);
        __stcs(c4 + v, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
    }
    // scalar tail: n % 4 elements after the last whole vector, one per thread
    const long long t = nvec * 4 + tid;
    if (t < n) {
        c[t] = a[t] + b[t];
    }
}
