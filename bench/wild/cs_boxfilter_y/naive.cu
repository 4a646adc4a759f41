// Naive vertical box filter written for this corpus (the direct form of cuda-samples' boxFilter
// y pass: the mean of the 2r+1 pixels of a column around each pixel, edge pixels duplicated);
// one thread a pixel, 16 x 16 blocks.
extern "C" __global__ void boxfilter_y(float *id, float *od, int w, int h, int r)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float t = 0.0f;
    for (int dy = -r; dy <= r; ++dy) {
        int yy = min(max(y + dy, 0), h - 1);
        t += id[yy * w + x];
    }
    od[y * w + x] = t * (1.0f / (float)((r << 1) + 1));
}
