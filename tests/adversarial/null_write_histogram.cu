// task: histogram
// expect: crash
// note: every thread also stores through a device-global pointer that is never set (null).
// note: The pointer is read through `volatile`, so the compiler cannot see it is null and drop or
// note: trap the store: it really writes address 0, which is never mapped -> illegal address,
// note: a sticky error -> crash.
__device__ unsigned int* volatile g_scratch = nullptr;

extern "C" __global__ void histogram(const int* x, unsigned int* bins, int n, int nbins)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = x[i];
        if (v >= 0 && v < nbins) {
            atomicAdd(&bins[v], 1u);
        }
        unsigned int* scratch = g_scratch;  // null
        scratch[threadIdx.x] = (unsigned int)v;
    }
}
