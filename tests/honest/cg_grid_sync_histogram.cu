// task: histogram
// covers: cooperative_launch, cooperative_groups, large_global, dynamic_smem
// note: cooperative launch: each of 128 blocks counts its grid-stride slice in a shared-memory
// note: histogram (dynamic shared memory sized from nbins), writes it to a 2 MB __device__ array of
// note: per-block partials, cg::this_grid().sync(), then every thread sums one bin over the blocks
// note: in order and writes it (bins starts at zero; exact counts). nbins above 4096 falls back to
// note: global atomics.
// kforge: grid = [128]
// kforge: block = [256]
// kforge: shared_mem = 4 * min(nbins, 4096)
// kforge: cooperative = true
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define BLOCKS 128
#define MAX_BINS 4096

__device__ unsigned int g_partial[BLOCKS * MAX_BINS];

extern "C" __global__ void __launch_bounds__(256) histogram(const int* __restrict__ x, unsigned int* __restrict__ bins,
                                                            int n, int nbins)
{
    cg::grid_group grid = cg::this_grid();
    extern __shared__ unsigned int local[];
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (nbins > MAX_BINS) {
        for (long long i = first; i < n; i += stride) {
            const int v = x[i];
            if (v >= 0 && v < nbins) {
                atomicAdd(&bins[v], 1u);
            }
        }
        return;                          // uniform over the grid: no grid.sync() is reached
    }
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
        local[b] = 0u;
    }
    __syncthreads();
    for (long long i = first; i < n; i += stride) {
        const int v = x[i];
        if (v >= 0 && v < nbins) {
            atomicAdd(&local[v], 1u);
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
        g_partial[blockIdx.x * MAX_BINS + b] = local[b];
    }
    grid.sync();
    for (long long b = grid.thread_rank(); b < nbins; b += grid.size()) {
        unsigned int total = 0u;
        for (int k = 0; k < gridDim.x; ++k) {
            total += g_partial[k * MAX_BINS + b];
        }
        bins[b] = total;
    }
}
