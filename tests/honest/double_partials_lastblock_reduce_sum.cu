// task: reduce_sum
// covers: double_global, last_block_double, module_global
// note: issue 19's refused kernel, in the style of the CUDA samples' threadFenceReduction: per-block
// note: partial sums in a __device__ double array, a __threadfence(), an atomicInc retirement
// note: ticket; the last block to retire adds the partials in block order (in double), writes
// note: out[0] and resets the counter. The old gate failed it on every case with
// note: "cuMemcpyDtoD(module global snapshot) failed: CUDA_ERROR_INVALID_VALUE".
#define BLOCK 256
#define MAX_BLOCKS 1024   // the manifest's grid is min(cdiv(n, 256), 1024)

__device__ double g_partial[MAX_BLOCKS];
__device__ unsigned int g_retirement_count = 0;

__device__ __forceinline__ double block_sum(double v, double* red)
{
    const int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s) {
            red[t] += red[t + s];
        }
        __syncthreads();
    }
    const double total = red[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void __launch_bounds__(BLOCK) reduce_sum(const float* x, float* out, int n)
{
    __shared__ double red[BLOCK];
    __shared__ bool am_last;
    double acc = 0.0;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long long)gridDim.x * BLOCK) {
        acc += x[i];
    }
    const double mine = block_sum(acc, red);
    if (threadIdx.x == 0) {
        g_partial[blockIdx.x] = mine;
        __threadfence();
        const unsigned int ticket = atomicInc(&g_retirement_count, gridDim.x);
        am_last = ticket == gridDim.x - 1;
    }
    __syncthreads();
    if (am_last) {
        double s = 0.0;
        for (unsigned int j = threadIdx.x; j < gridDim.x; j += BLOCK) {
            s += ((volatile double*)g_partial)[j];
        }
        const double total = block_sum(s, red);
        if (threadIdx.x == 0) {
            out[0] = (float)total;
            g_retirement_count = 0;
        }
    }
}
