// task: histogram
// covers: grid_constant, dynamic_smem
// note: nbins and n as __grid_constant__ parameters; a privatised shared-memory histogram sized
// note: from nbins (dynamic shared memory), merged into bins with one atomicAdd per non-zero bin.
// kforge: grid = [min(cdiv(n, 256 * 16), 1056)]
// kforge: block = [256]
// kforge: shared_mem = 4 * nbins
extern "C" __global__ void __launch_bounds__(256) histogram(const int* __restrict__ x, unsigned int* __restrict__ bins,
                                                            const __grid_constant__ int n, const __grid_constant__ int nbins)
{
    extern __shared__ unsigned int local[];
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) local[b] = 0u;
    __syncthreads();
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const int v = x[i];
        if (v >= 0 && v < nbins) atomicAdd(&local[v], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
        const unsigned int v = local[b];
        if (v) atomicAdd(&bins[b], v);
    }
}
