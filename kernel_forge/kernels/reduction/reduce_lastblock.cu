// reduce_sum -- expert pattern reduce_lastblock: a full reduction in one launch, deterministic.
// A persistent grid (BPS blocks per SM) walks x as float4 with ACC independent accumulators per
// thread (ILP), each block reduces its threads' sums with warp shuffles and one shared-memory
// step in a fixed order, and writes its partial to a module global.  The last block to finish
// (a __threadfence, then an atomic ticket) adds the partials in block order and writes out[0]:
// the same bits on every launch, no float atomics, and the result is as accurate as a
// pairwise sum over blocks.  The ticket is reset by that last block, so the next launch starts
// clean (the harness also restores module globals before every launch).
// The n % 4 elements past the last whole float4 go to block 0.
// kforge: grid = [max(1, min(132 * BPS, cdiv(n, 4 * BLOCK * ACC))), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 512, 1024, 128]
// kforge: tune ACC = [4, 2, 8]
// kforge: tune BPS = [4, 2, 8]
// kforge: constraint BLOCK * BPS <= 2048
// kforge: constraint 132 * BPS <= 2048

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ACC
#define ACC 4
#endif
#ifndef BPS
#define BPS 4
#endif

#define WARPS (BLOCK / 32)
#define MAX_BLOCKS 2048

__device__ float kf_partials[MAX_BLOCKS];
__device__ unsigned int kf_ticket;

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// the block's sum of v, in a fixed order; valid in thread 0
__device__ __forceinline__ float block_sum(float v, float* red)
{
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x < 32) {
        s = threadIdx.x < WARPS ? red[threadIdx.x] : 0.0f;
        s = warp_sum(s);
    }
    return s;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ float red[WARPS];
    __shared__ bool last;
    const long long nvec = n >> 2;
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
    const long long stride = (long long)gridDim.x * BLOCK;
    long long v = (long long)blockIdx.x * BLOCK + threadIdx.x;

    float acc[ACC];
#pragma unroll
    for (int j = 0; j < ACC; ++j) acc[j] = 0.0f;
    for (; v + (ACC - 1) * stride < nvec; v += ACC * stride) {
        float4 q[ACC];
#pragma unroll
        for (int j = 0; j < ACC; ++j) q[j] = __ldcs(x4 + v + j * stride);
#pragma unroll
        for (int j = 0; j < ACC; ++j) acc[j] += (q[j].x + q[j].y) + (q[j].z + q[j].w);
    }
    for (; v < nvec; v += stride) {
        const float4 q = __ldcs(x4 + v);
        acc[0] += (q.x + q.y) + (q.z + q.w);
    }
    if (blockIdx.x == 0 && threadIdx.x < (n & 3)) {
        acc[0] += x[nvec * 4 + threadIdx.x];
    }
    float t = 0.0f;
#pragma unroll
    for (int j = 0; j < ACC; ++j) t += acc[j];

    t = block_sum(t, red);
    if (threadIdx.x == 0) {
        kf_partials[blockIdx.x] = t;
        __threadfence();                                   // the partial is visible before the ticket
        last = atomicAdd(&kf_ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last) {                                           // uniform: one shared flag
        __threadfence();
        float s = 0.0f;
        for (int b = threadIdx.x; b < (int)gridDim.x; b += BLOCK) {
            s += __ldcg(kf_partials + b);                  // from L2: other blocks wrote them
        }
        __syncthreads();                                   // red is reused
        s = block_sum(s, red);
        if (threadIdx.x == 0) {
            out[0] = s;
            kf_ticket = 0u;
        }
    }
}
