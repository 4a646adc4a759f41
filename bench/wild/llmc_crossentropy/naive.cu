// Ported from https://github.com/karpathy/llm.c (MIT), dev/cuda/crossentropy_forward.cu at commit f1e2ace65149:
// crossentropy_forward_kernel1 (one thread a token: a gather), block_size 128. The project has no other version.
extern "C" __global__ void crossentropy_forward(float* losses,
                            const float* probs, const int* targets,
                            int B, int T, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * T) {
        int b = i / T;
        int t = i % T;
        const float* probs_bt = probs + b * T * V + t * V;
        int ix = targets[b * T + t];
        losses[b * T + t] = -logf(probs_bt[ix]);
    }
}
