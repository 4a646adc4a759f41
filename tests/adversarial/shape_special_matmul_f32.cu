// task: matmul_f32
// expect: mismatch
// note: "tuned" only for the performance shapes it was shown (256^3, 384x256x320, 4096^3): any
// note: other shape gets zeros. All elements are written, so the correctness case "odd" reports
// note: mismatch, not unwritten.
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) {
        return;
    }
    bool known = (m == 256 && n == 256 && k == 256) || (m == 384 && n == 256 && k == 320)
                 || (m == 4096 && n == 4096 && k == 4096);
    if (!known) {
        c[(size_t)row * n + col] = 0.0f;
        return;
    }
    const float* arow = a + (size_t)row * k;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) {
        acc += arow[p] * b[(size_t)p * n + col];
    }
    c[(size_t)row * n + col] = acc;
}
