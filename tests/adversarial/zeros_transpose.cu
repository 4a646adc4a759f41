// task: transpose
// expect: mismatch
// note: writes 0.0f to every element of y. All elements are written (none keeps the poison),
// note: but the values are wrong (x is normal, never exactly zero), so the reason is mismatch.
extern "C" __global__ void transpose(const float* x, float* y, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        y[(size_t)c * rows + r] = 0.0f;
    }
}
