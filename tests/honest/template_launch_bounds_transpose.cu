// task: transpose
// covers: template, launch_bounds
// note: a templated tiled transpose (TILE x TILE through padded shared memory, ROWS rows of threads)
// note: instantiated at <32, 8> with __launch_bounds__(256, 4).
// kforge: grid = [cdiv(cols, 32), cdiv(rows, 32)]
// kforge: block = [32, 8]
template <int TILE, int ROWS>
__device__ __forceinline__ void transpose_tile(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];
    const int c = blockIdx.x * TILE + threadIdx.x;
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        const int gr = blockIdx.y * TILE + r;
        if (gr < rows && c < cols) tile[r][threadIdx.x] = x[(long long)gr * cols + c];
    }
    __syncthreads();
    const int oc = blockIdx.y * TILE + threadIdx.x;        // a column of y = a row of x
    for (int r = threadIdx.y; r < TILE; r += ROWS) {
        const int orow = blockIdx.x * TILE + r;            // a row of y = a column of x
        if (orow < cols && oc < rows) y[(long long)orow * rows + oc] = tile[threadIdx.x][r];
    }
}

extern "C" __global__ void __launch_bounds__(256, 4) transpose(const float* __restrict__ x, float* __restrict__ y,
                                                               int rows, int cols)
{
    transpose_tile<32, 8>(x, y, rows, cols);
}
