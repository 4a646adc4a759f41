// kforge: grid = [width / 32, height / 32]
// kforge: block = [32, 16]
// Ported from https://github.com/NVIDIA/cuda-samples (BSD-3-Clause), Samples/6_Performance/transpose/transpose.cu at commit c94ff366aed1:
// transposeNoBankConflicts (shared tile padded by one column), same launch.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define TILE_DIM   32
#define BLOCK_ROWS 16

extern "C" __global__ void transpose_naive(float *odata, float *idata, int width, int height)
{
    // Handle to thread block group
    cg::thread_block cta = cg::this_thread_block();
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];

    int xIndex   = blockIdx.x * TILE_DIM + threadIdx.x;
    int yIndex   = blockIdx.y * TILE_DIM + threadIdx.y;
    int index_in = xIndex + (yIndex)*width;

    xIndex        = blockIdx.y * TILE_DIM + threadIdx.x;
    yIndex        = blockIdx.x * TILE_DIM + threadIdx.y;
    int index_out = xIndex + (yIndex)*height;

    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS) {
        tile[threadIdx.y + i][threadIdx.x] = idata[index_in + i * width];
    }

    cg::sync(cta);

    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS) {
        odata[index_out + i * height] = tile[threadIdx.x][threadIdx.y + i];
    }
}
