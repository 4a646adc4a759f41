// kforge: grid = [cdiv(w, BX), cdiv(h, BY * RY), 1]
// kforge: block = [BX, BY, 1]
// kforge: tune BX = [32, 8, 16, 64, 128]
// kforge: tune BY = [4, 1, 2, 8, 16]
// kforge: tune RY = [1, 2, 4]
// kforge: constraint BX * BY >= 64
// kforge: constraint BX * BY <= 1024
#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 4
#endif
#ifndef RY
#define RY 1
#endif
// The same blur as naive.cu with its own tunables (a user's kernel with tune lines): BX x BY threads,
// each computing RY rows; 54 valid settings.  The Kernel Tuner side-by-side benchmark uses it.
extern "C" __global__ void blur3x3(const float* x, float* y, int h, int w)
{
    int c = blockIdx.x * BX + threadIdx.x;
    int r0 = (blockIdx.y * BY + threadIdx.y) * RY;
    if (c >= w) return;
    int cl = c > 0 ? c - 1 : 0, cr = c < w - 1 ? c + 1 : w - 1;
#pragma unroll
    for (int k = 0; k < RY; ++k) {
        int r = r0 + k;
        if (r >= h) return;
        int ru = r > 0 ? r - 1 : 0, rd = r < h - 1 ? r + 1 : h - 1;
        float s = x[ru * w + cl] + x[ru * w + c] + x[ru * w + cr]
                + x[r * w + cl] + x[r * w + c] + x[r * w + cr]
                + x[rd * w + cl] + x[rd * w + c] + x[rd * w + cr];
        y[r * w + c] = s * (1.0f / 9.0f);
    }
}
