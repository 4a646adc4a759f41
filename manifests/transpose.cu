// transpose: y[c, r] = x[r, c]; x is rows x cols, y is cols x rows (both row-major).
// Naive initial kernel: one element per thread; reads of x are coalesced, writes of y are not
// (consecutive threads write addresses `rows` floats apart).  Launched with the manifest's
// block = [32, 8], grid = [cdiv(cols, 32), cdiv(rows, 8)].
extern "C" __global__ void transpose(const float* x, float* y, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        y[(size_t)c * rows + r] = x[(size_t)r * cols + c];
    }
}
