// task: reduce_sum
// covers: last_block_float, libcu++
// note: float partials and a retirement counter as libcu++ device-scope atomics: each block stores
// note: its sum, then fetch_add(acq_rel) on cuda::atomic_ref<unsigned, thread_scope_device>; the
// note: block that sees gridDim.x - 1 reads every partial (the acquire makes them visible), adds
// note: them in order with warp shuffles, writes out[0] and stores 0 back (release).
#include <cuda/atomic>

#define BLOCK 256
#define MAX_BLOCKS 1024

__device__ float g_partial[MAX_BLOCKS];
__device__ unsigned int g_arrived;

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* warps)
{
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) warps[w] = v;
    __syncthreads();
    v = threadIdx.x < BLOCK / 32 ? warps[threadIdx.x] : 0.0f;
    if (w == 0) v = warp_sum(v);
    __syncthreads();
    return v;                          // valid in thread 0
}

extern "C" __global__ void __launch_bounds__(BLOCK) reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ float warps[BLOCK / 32];
    __shared__ bool am_last;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
        acc += x[i];
    }
    const float mine = block_sum(acc, warps);
    if (threadIdx.x == 0) {
        g_partial[blockIdx.x] = mine;
        cuda::atomic_ref<unsigned int, cuda::thread_scope_device> arrived(g_arrived);
        am_last = arrived.fetch_add(1u, cuda::std::memory_order_acq_rel) == gridDim.x - 1;
    }
    __syncthreads();
    if (!am_last) {
        return;
    }
    cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_device);
    float s = 0.0f;
    for (unsigned int j = threadIdx.x; j < gridDim.x; j += BLOCK) {
        s += ((volatile float*)g_partial)[j];
    }
    const float total = block_sum(s, warps);
    if (threadIdx.x == 0) {
        out[0] = total;
        cuda::atomic_ref<unsigned int, cuda::thread_scope_device> arrived(g_arrived);
        arrived.store(0u, cuda::std::memory_order_release);
    }
}
