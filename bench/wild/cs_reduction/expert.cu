// kforge: grid = [cdiv(n, 512)]
// kforge: block = [256]
// kforge: shared_mem = 1024
// Ported from https://github.com/NVIDIA/cuda-samples (BSD-3-Clause), Samples/2_Concepts_and_Techniques/reduction/reduction_kernel.cu at commit c94ff366aed1:
// reduce4 with T = float, blockSize = 256 (first add during the load, warp shuffles): each block of 256 sums 512 elements.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void reduce_blocks(float *g_idata, float *g_odata, unsigned int n)
{
    // Handle to thread block group
    cg::thread_block cta   = cg::this_thread_block();
    extern __shared__ float sdata[];   // SharedMemory<float>()

    // perform first level of reduction,
    // reading from global memory, writing to shared memory
    unsigned int tid = threadIdx.x;
    unsigned int i   = blockIdx.x * (blockDim.x * 2) + threadIdx.x;

    float mySum = (i < n) ? g_idata[i] : 0;

    if (i + 256 < n)
        mySum += g_idata[i + 256];

    sdata[tid] = mySum;
    cg::sync(cta);

    // do reduction in shared mem
    for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) {
            sdata[tid] = mySum = mySum + sdata[tid + s];
        }

        cg::sync(cta);
    }

    cg::thread_block_tile<32> tile32 = cg::tiled_partition<32>(cta);

    if (cta.thread_rank() < 32) {
        // Fetch final intermediate sum from 2nd warp
        if (256 >= 64)
            mySum += sdata[tid + 32];
        // Reduce final warp using shuffle
        for (int offset = tile32.size() / 2; offset > 0; offset /= 2) {
            mySum += tile32.shfl_down(mySum, offset);
        }
    }

    // write result for this block to global mem
    if (cta.thread_rank() == 0)
        g_odata[blockIdx.x] = mySum;
}
