// histogram: bins[v] += 1 for every x[i] = v with 0 <= v < nbins; values outside [0, nbins)
// are ignored.  `bins` is reset to zero before every launch.
// Naive initial kernel: one element per thread, atomicAdd straight into the global bins;
// launched with the manifest's grid = [cdiv(n, 256)], block = [256].
extern "C" __global__ void histogram(const int* x, unsigned int* bins, int n, int nbins)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = x[i];
        if (v >= 0 && v < nbins) {
            atomicAdd(&bins[v], 1u);
        }
    }
}
