// 3x3 box blur, edge pixels duplicated (clamped indices): the direct 2-D form of the box filter
// of NVIDIA cuda-samples boxFilter (BSD-3-Clause) at radius 1; one thread per output pixel.
extern "C" __global__ void blur3x3(const float* x, float* y, int h, int w)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= h || c >= w) return;
    float s = 0.0f;
#pragma unroll
    for (int dy = -1; dy <= 1; ++dy) {
        int rr = min(max(r + dy, 0), h - 1);
#pragma unroll
        for (int dx = -1; dx <= 1; ++dx) {
            int cc = min(max(c + dx, 0), w - 1);
            s += x[rr * w + cc];
        }
    }
    y[r * w + c] = s * (1.0f / 9.0f);
}
