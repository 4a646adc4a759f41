// task: reduce_sum
// covers: atomic_double, last_block_double, double_global
// note: each block adds its sum to a __device__ double with atomicAdd(double*) (sm_60+), then takes
// note: a ticket; the last block reads the total with an atomic (atomicAdd of 0.0), writes it as
// note: float to out[0] and resets the total and the ticket. Double atomics make the order, not the
// note: accuracy, vary: the task is declared nondeterministic.
#define BLOCK 256

__device__ double g_total = 0.0;
__device__ unsigned int g_ticket = 0;

extern "C" __global__ void __launch_bounds__(BLOCK) reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ double red[BLOCK];
    __shared__ bool am_last;
    double acc = 0.0;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
        acc += x[i];
    }
    const int t = threadIdx.x;
    red[t] = acc;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        __syncthreads();
    }
    if (t == 0) {
        atomicAdd(&g_total, red[0]);
        __threadfence();
        am_last = atomicAdd(&g_ticket, 1u) == gridDim.x - 1;
        if (am_last) {
            const double total = atomicAdd(&g_total, 0.0);
            out[0] = (float)total;
            g_total = 0.0;
            g_ticket = 0u;
        }
    }
}
