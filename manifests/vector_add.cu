// vector_add: c[i] = a[i] + b[i] for 0 <= i < n.
// Naive initial kernel: one element per thread, bounds-checked; launched with the manifest's
// grid = [cdiv(n, 256)], block = [256].
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
