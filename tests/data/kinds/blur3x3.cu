// A naive 3x3 binomial blur with clamped edges: one thread per pixel, nine loads.
extern "C" __global__ void blur3x3(const float* x, float* y, int h, int w)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= h || c >= w) return;
    const float k[3] = {1.0f, 2.0f, 1.0f};
    float acc = 0.0f;
    for (int dy = -1; dy <= 1; ++dy) {
        int rr = min(max(r + dy, 0), h - 1);
        for (int dx = -1; dx <= 1; ++dx) {
            int cc = min(max(c + dx, 0), w - 1);
            acc += k[dy + 1] * k[dx + 1] * x[(long long)rr * w + cc];
        }
    }
    y[(long long)r * w + c] = acc * (1.0f / 16.0f);
}
