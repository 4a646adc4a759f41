// Ported from https://github.com/karpathy/llm.c (MIT), dev/cuda/encoder_forward.cu at commit f1e2ace65149:
// encoder_forward_kernel1 (one thread a token), fp32 build, block_size 256.
typedef float floatX;

extern "C" __global__ void encoder_forward(float* out,
                               const int* inp, const float* wte, const float* wpe,
                               int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int N = B * T;

    if (idx < N) {
        int b = idx / T;
        int t = idx % T;
        floatX* out_bt = out + b * T * C + t * C;
        int ix = inp[b * T + t];
        const floatX* wte_ix = wte + ix * C;
        const floatX* wpe_t = wpe + t * C;
        for (int i = 0; i < C; i++) {
            out_bt[i] = (floatX)((float)wte_ix[i] + (float)wpe_t[i]);
        }
    }
}
