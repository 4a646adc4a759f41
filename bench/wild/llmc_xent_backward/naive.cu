// Ported from https://github.com/karpathy/llm.c (MIT), dev/cuda/crossentropy_softmax_backward.cu at commit
// f1e2ace65149: crossentropy_softmax_backward_kernel1 (one thread a logit), block_size 128 (the file's
// smallest; it times 32 to 1024).  The project has no other version.
extern "C"
__global__ void crossentropy_softmax_backward_kernel1(float* dlogits,
                           const float* dlosses, const float* probs, const int* targets,
                           int B, int T, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * T * V) {
        int b = i / (T * V);
        int t = (i / V) % T;
        int v = i % V;
        float* dlogits_bt = dlogits + b * T * V + t * V;
        const float* probs_bt = probs + b * T * V + t * V;
        float dloss = dlosses[b * T + t];
        int ix = targets[b * T + t];
        float p = probs_bt[v];
        float indicator = v == ix ? 1.0f : 0.0f;
        dlogits_bt[v] += (p - indicator) * dloss;
    }
}
