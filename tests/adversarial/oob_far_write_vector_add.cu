// task: vector_add
// expect: crash
// note: computes c[i] but stores it 2^40 elements (4 TiB) past the start of c. No allocation of
// note: this process (nor, with HMM, any host mapping) lies there, so the store faults:
// note: CUDA_ERROR_ILLEGAL_ADDRESS, a sticky error -> crash, and the worker is replaced.
// note: A small overrun (c[i + (1 << 30)] is only 4 GiB away) could land in another allocation
// note: and corrupt it silently instead.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i + (1LL << 40)] = a[i] + b[i];
    }
}
