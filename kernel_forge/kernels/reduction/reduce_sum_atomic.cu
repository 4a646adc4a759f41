// reduce_sum: persistent grid-stride float4 reduction with UNROLL independent accumulators per
// thread (ILP), a warp-shuffle + shared-memory block reduction, then ONE float atomicAdd per
// block into out[0] (out is zeroed before every launch; the task is declared nondeterministic
// because the order of the block atomics varies).  The n % 4 elements after the last whole
// float4 are added by the first threads of block 0.  Grid: 132 SMs * BLOCKS_PER_SM blocks,
// capped by the work so tiny inputs launch a single block.
// kforge: grid = [max(1, min(132 * BLOCKS_PER_SM, cdiv(n, 4 * BLOCK * UNROLL))), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune UNROLL = [4, 1, 2, 8]
// kforge: tune BLOCKS_PER_SM = [4, 1, 2, 8]
// kforge: constraint BLOCK * BLOCKS_PER_SM <= 2048

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 4
#endif

#define NWARPS (BLOCK / 32)

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, off);
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ float partial[NWARPS];
    const long long nvec = n >> 2;
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
    const long long tid = (long long)blockIdx.x * BLOCK + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * BLOCK;

    float acc[UNROLL];
#pragma unroll
    for (int j = 0; j < UNROLL; ++j) {
        acc[j] = 0.0f;
    }
    long long v = tid;
    for (; v + (UNROLL - 1) * nthreads < nvec; v += UNROLL * nthreads) {
        float4 t[UNROLL];
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            t[j] = __ldcs(x4 + v + j * nthreads);
        }
#pragma unroll
        for (int j = 0; j < UNROLL; ++j) {
            acc[j] += (t[j].x + t[j].y) + (t[j].z + t[j].w);
        }
    }
    for (; v < nvec; v += nthreads) {
        const float4 t = __ldcs(x4 + v);
        acc[0] += (t.x + t.y) + (t.z + t.w);
    }
    // scalar tail (at most 3 elements), block 0 only
    if (blockIdx.x == 0) {
        const long long i = nvec * 4 + threadIdx.x;
        if (i < n) {
            acc[0] += x[i];
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < UNROLL; ++j) {
        s += acc[j];
    }

    s = warp_sum(s);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) {
        partial[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        float t = lane < NWARPS ? partial[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) {
            atomicAdd(out, t);
        }
    }
}
