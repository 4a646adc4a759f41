// task: vector_add
// expect: compile_error
// note: uses an identifier that is declared nowhere; NVRTC rejects the file and names the line
// note: marked EXPECT-LINE. The gate stops before any GPU work.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i] + bias_correction;  // EXPECT-LINE
    }
}
