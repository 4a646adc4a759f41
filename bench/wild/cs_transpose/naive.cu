// Ported from https://github.com/NVIDIA/cuda-samples (BSD-3-Clause), Samples/6_Performance/transpose/transpose.cu at commit c94ff366aed1:
// transposeNaive (width and height multiples of TILE_DIM), grid (width/32, height/32) of 32 x 16 threads.
#define TILE_DIM   32
#define BLOCK_ROWS 16

extern "C" __global__ void transpose_naive(float *odata, float *idata, int width, int height)
{
    int xIndex = blockIdx.x * TILE_DIM + threadIdx.x;
    int yIndex = blockIdx.y * TILE_DIM + threadIdx.y;

    int index_in  = xIndex + width * yIndex;
    int index_out = yIndex + height * xIndex;

    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS) {
        odata[index_out + i] = idata[index_in + i * width];
    }
}
