// task: reduce_sum
// covers: cooperative_groups
// note: cooperative_groups: a thread_block and its 32-thread tiles (tiled_partition<32>), cg::reduce
// note: with cg::plus within each tile, tile totals through shared memory to the first tile, one
// note: atomicAdd per block. No kforge header: the manifest's launch (256 threads per block).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

extern "C" __global__ void reduce_sum(const float* x, float* out, int n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    __shared__ float partial[32];
    float acc = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        acc += x[i];
    }
    const float tile_sum = cg::reduce(tile, acc, cg::plus<float>());
    if (tile.thread_rank() == 0) {
        partial[tile.meta_group_rank()] = tile_sum;
    }
    block.sync();
    if (tile.meta_group_rank() == 0) {
        float v = tile.thread_rank() < tile.meta_group_size() ? partial[tile.thread_rank()] : 0.0f;
        v = cg::reduce(tile, v, cg::plus<float>());
        if (tile.thread_rank() == 0) {
            atomicAdd(out, v);
        }
    }
}
