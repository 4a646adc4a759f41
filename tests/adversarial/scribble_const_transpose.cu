// task: transpose
// expect: input_modified
// note: transposes correctly, then casts away const and zeroes the element of x it just read
// note: (each thread touches only its own element, so there is no race). y is right, but the
// note: const-input checksum after checked launch 1 differs; that check runs before any output
// note: comparison -> input_modified.
// message: x
extern "C" __global__ void transpose(const float* x, float* y, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        size_t src = (size_t)r * cols + c;
        y[(size_t)c * rows + r] = x[src];
        const_cast<float*>(x)[src] = 0.0f;  // scratch space "for free"
    }
}
