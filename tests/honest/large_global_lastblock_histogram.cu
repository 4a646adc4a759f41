// task: histogram
// covers: large_global, last_block_int, dynamic_smem
// note: 256 blocks each count a grid-stride slice in a shared-memory histogram (dynamic shared
// note: memory sized from nbins) and write it to a 4 MB __device__ array of per-block partials;
// note: a __threadfence() and an atomicAdd ticket pick the last block, which adds the partials in
// note: block order, writes bins and resets the ticket. Exact and deterministic. nbins above 4096
// note: uses global atomics directly.
// kforge: grid = [256]
// kforge: block = [256]
// kforge: shared_mem = 4 * min(nbins, 4096)
#define BLOCKS 256
#define MAX_BINS 4096

__device__ unsigned int g_partial[BLOCKS * MAX_BINS];
__device__ unsigned int g_ticket;

extern "C" __global__ void __launch_bounds__(256) histogram(const int* __restrict__ x, unsigned int* __restrict__ bins,
                                                            int n, int nbins)
{
    extern __shared__ unsigned int local[];
    __shared__ bool am_last;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (nbins > MAX_BINS) {
        for (long long i = first; i < n; i += stride) {
            const int v = x[i];
            if (v >= 0 && v < nbins) atomicAdd(&bins[v], 1u);
        }
        return;
    }
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) local[b] = 0u;
    __syncthreads();
    for (long long i = first; i < n; i += stride) {
        const int v = x[i];
        if (v >= 0 && v < nbins) atomicAdd(&local[v], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
        g_partial[blockIdx.x * MAX_BINS + b] = local[b];
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        am_last = atomicAdd(&g_ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!am_last) {
        return;
    }
    __threadfence();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
        unsigned int total = 0u;
        for (int k = 0; k < gridDim.x; ++k) {
            total += ((volatile unsigned int*)g_partial)[k * MAX_BINS + b];
        }
        bins[b] = total;
    }
    if (threadIdx.x == 0) {
        g_ticket = 0u;
    }
}
