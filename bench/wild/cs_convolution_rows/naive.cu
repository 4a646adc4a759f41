// Naive row pass of a separable convolution, written for this corpus (the direct form of
// cuda-samples' convolutionSeparable convolutionRowsKernel: zero outside the image, the taps reversed
// as the sample applies them); one thread a pixel, 16 x 16 blocks.
#define KERNEL_RADIUS 8
#define KERNEL_LENGTH (2 * KERNEL_RADIUS + 1)
// the sample sets c_Kernel from the host (cudaMemcpyToSymbol, random taps); the corpus fixes a
// normalised Gaussian of sigma 3 in the source, the reference's taps
__constant__ float c_Kernel[KERNEL_LENGTH] = {0.003815529f, 0.008779440f, 0.018076899f, 0.033306279f, 0.054912770f, 0.081015040f, 0.106955472f, 0.126352961f, 0.133571220f, 0.126352961f, 0.106955472f, 0.081015040f, 0.054912770f, 0.033306279f, 0.018076899f, 0.008779440f, 0.003815529f};

extern "C" __global__ void convolutionRowsKernel(float *d_Dst, float *d_Src, int imageW, int imageH, int pitch)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= imageW || y >= imageH) return;
    float sum = 0.0f;
    for (int j = -KERNEL_RADIUS; j <= KERNEL_RADIUS; j++) {
        const int xx = x + j;
        if (xx >= 0 && xx < imageW) sum += c_Kernel[KERNEL_RADIUS - j] * d_Src[y * pitch + xx];
    }
    d_Dst[y * pitch + x] = sum;
}
