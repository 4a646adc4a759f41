// task: matmul_f32
// expect: unwritten
// note: computes row 0 of C correctly (the naive kernel's arithmetic) and leaves the other rows
// note: alone. The first case is "odd" (m = 31): rows 1..30 still hold the float32 poison
// note: -3e38, row 0 is within tolerance, so every mismatch is unwritten -> unwritten
// note: (a partial write whose written part were wrong would be reported as mismatch).
// message: never written
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row != 0 || col >= n || m < 1) {
        return;
    }
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) {
        acc += a[p] * b[(size_t)p * n + col];
    }
    c[col] = acc;
}
