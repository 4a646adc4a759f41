// task: reduce_sum
// covers: cooperative_launch, cooperative_groups, module_global
// note: a cooperative launch (// kforge: cooperative = true): 128 blocks, each writes its block
// note: sum to a __device__ array, cg::this_grid().sync(), then block 0 adds the 128 partials in
// note: order: one deterministic pass, no atomics. The grid must fit on the GPU at once (the gate
// note: checks occupancy x SMs before launching).
// kforge: grid = [128]
// kforge: block = [256]
// kforge: cooperative = true
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define BLOCKS 128
#define BLOCK 256

__device__ float g_block_sum[BLOCKS];

__device__ __forceinline__ float block_tree(float v, float* red)
{
    const int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) {
            red[t] += red[t + s];
        }
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void __launch_bounds__(BLOCK) reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    cg::grid_group grid = cg::this_grid();
    __shared__ float red[BLOCK];
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
        acc += x[i];
    }
    const float mine = block_tree(acc, red);
    if (threadIdx.x == 0) {
        g_block_sum[blockIdx.x] = mine;
    }
    grid.sync();
    if (blockIdx.x == 0) {
        const float v = threadIdx.x < gridDim.x ? g_block_sum[threadIdx.x] : 0.0f;
        const float total = block_tree(v, red);
        if (threadIdx.x == 0) {
            out[0] = total;
        }
    }
}
