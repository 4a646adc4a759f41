// task: reduce_sum
// covers: cub, launch_bounds
// note: CUB's BlockReduce sums each block's grid-stride slice; one float atomicAdd per block into
// note: out[0] (zeroed before every launch; the task allows the order of the block sums to vary).
// note: The issue-19 report's 14.5x over the initial kernel came from this pattern.
// kforge: grid = [min(cdiv(n, 256 * 8), 1024)]
// kforge: block = [256]
#include <cub/block/block_reduce.cuh>

#define BLOCK 256

extern "C" __global__ void __launch_bounds__(BLOCK) reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    typedef cub::BlockReduce<float, BLOCK> Reduce;
    __shared__ Reduce::TempStorage temp;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
        acc += x[i];
    }
    const float total = Reduce(temp).Sum(acc);
    if (threadIdx.x == 0) {
        atomicAdd(out, total);
    }
}
