// task: histogram
// expect: stale_after_timing
// note: the same "seen these inputs twice already" cheat as skip_timed_vector_add.cu (keyed on n,
// note: nbins, x[0], x[n/2], x[n-1]): checked launch and repeat compute, warm-up and timed
// note: launches skip. Here the output bins is in/out (init zeros) and the gate resets it before
// note: every timed launch, so after timing bins holds zeros. Outputs are re-checked before the
// note: plausibility check: n16M -> stale_after_timing.
// note: Twin (-DKF_TWIN=1): never skips. Restoring the module's initial globals before every launch
// note: makes it PASS: accepted too, if no faster than the twin.
// message: after timing
// kforge: grid = [min(cdiv(n, 256), 1024)]
// kforge: block = [256]
#define KEYS 5

__device__ int g_key[KEYS];
__device__ unsigned int g_seen = 0;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void histogram(const int* x, unsigned int* bins, int n, int nbins)
{
    __shared__ int same, skip;
    if (threadIdx.x == 0) {
        int key[KEYS] = {n, nbins, x[0], x[n / 2], x[n - 1]};
        int s = 1;
        for (int q = 0; q < KEYS; ++q) {
            s &= ((volatile int*)g_key)[q] == key[q];
        }
        same = s;
        skip = s && *(volatile unsigned int*)&g_seen >= 2;
#ifdef KF_TWIN
        skip = 0;   // the honest twin never skips
#endif
    }
    __syncthreads();
    if (!skip) {
        long long stride = (long long)gridDim.x * blockDim.x;
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            int v = x[i];
            if (v >= 0 && v < nbins) {
                atomicAdd(&bins[v], 1u);
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x - 1) {  // the last block of this launch updates the memo
            g_blocks_finished = 0;
            if (same) {
                g_seen += 1;
            } else {
                g_key[0] = n;
                g_key[1] = nbins;
                g_key[2] = x[0];
                g_key[3] = x[n / 2];
                g_key[4] = x[n - 1];
                g_seen = 1;
            }
            __threadfence();
        }
    }
}
