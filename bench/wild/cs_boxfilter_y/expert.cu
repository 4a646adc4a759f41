// kforge: grid = [w / 64]
// kforge: block = [64]
// Ported from https://github.com/NVIDIA/cuda-samples (BSD-3-Clause), Samples/2_Concepts_and_Techniques/boxFilter/boxFilter_kernel.cu at commit c94ff366aed1:
// d_boxfilter_y_global + d_boxfilter_y (one thread a column, sliding window, edge pixels duplicated; w a multiple of 64), width / nthreads blocks of nthreads = 64.
__device__ void d_boxfilter_y(float *id, float *od, int w, int h, int r)
{
    float scale = 1.0f / (float)((r << 1) + 1);

    float t;
    // do left edge
    t = id[0] * r;

    for (int y = 0; y < (r + 1); y++) {
        t += id[y * w];
    }

    od[0] = t * scale;

    for (int y = 1; y < (r + 1); y++) {
        t += id[(y + r) * w];
        t -= id[0];
        od[y * w] = t * scale;
    }

    // main loop
    for (int y = (r + 1); y < (h - r); y++) {
        t += id[(y + r) * w];
        t -= id[((y - r) * w) - w];
        od[y * w] = t * scale;
    }

    // do right edge
    for (int y = h - r; y < h; y++) {
        t += id[(h - 1) * w];
        t -= id[((y - r) * w) - w];
        od[y * w] = t * scale;
    }
}

extern "C" __global__ void boxfilter_y(float *id, float *od, int w, int h, int r)
{
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    d_boxfilter_y(&id[x], &od[x], w, h, r);
}
