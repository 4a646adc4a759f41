// llm.c's naive layernorm_forward (kernel 1 of dev/cuda/layernorm_forward.cu, written again here):
// one thread per row, the row read three times.
extern "C" __global__ void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                             const float* weight, const float* bias, int N, int C)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    float eps = 1e-5f;
    if (idx < N) {
        const float* x = inp + (long long)idx * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float xshift = x[i] - m;
            v += xshift * xshift;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + eps);
        float* out_idx = out + (long long)idx * C;
        for (int i = 0; i < C; i++) out_idx[i] = s * (x[i] - m) * weight[i] + bias[i];
        mean[idx] = m;
        rstd[idx] = s;
    }
}
