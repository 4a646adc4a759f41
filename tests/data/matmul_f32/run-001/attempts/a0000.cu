// matmul_f32: row-major C[m, n] = A[m, k] @ B[k, n] in float32.
// Naive initial kernel: one thread per output element, a plain loop over k, no shared memory;
// launched with the manifest's block = [16, 16], grid = [cdiv(n, 16), cdiv(m, 16)].
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) {
        return;
    }
    const float* arow = a + (size_t)row * k;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) {
        acc += arow[p] * b[(size_t)p * n + col];
    }
    c[(size_t)row * n + col] = acc;
}