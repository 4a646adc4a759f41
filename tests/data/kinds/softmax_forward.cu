// llm.c's naive softmax_forward (kernel 1 of dev/cuda/softmax_forward.cu, written again here): one
// thread per row.
extern "C" __global__ void softmax_forward(float* out, const float* inp, int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float* inp_row = inp + (long long)i * C;
        float* out_row = out + (long long)i * C;
        float maxval = -3.402823466e38f;
        for (int j = 0; j < C; j++) maxval = fmaxf(maxval, inp_row[j]);
        double sum = 0.0;
        for (int j = 0; j < C; j++) {
            out_row[j] = expf(inp_row[j] - maxval);
            sum += out_row[j];
        }
        for (int j = 0; j < C; j++) out_row[j] /= (float)sum;
    }
}
