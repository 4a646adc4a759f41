// task: vector_add
// expect: signature_mismatch
// note: takes double* where the task declares float*: the buffers would be read as the wrong
// note: type. The signature check refuses it before compiling -> signature_mismatch.
extern "C" __global__ void vector_add(const double* a, const double* b, double* c, int n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
