// task: reduce_sum
// expect: passed
// note: legitimate module state (must PASS): a single-pass, deterministic reduction. Each block sums
// note: its grid-stride slice (a fixed-order tree in shared memory) and writes the partial to a
// note: module-scope __device__ array (rewritten on every launch); the last block to arrive (an
// note: atomic ticket on a __device__ counter) adds the partials in block order, writes out[0] and
// note: resets the counter to 0. So the counter is back at its initial value after every launch
// note: and the partials array changes on every launch but is always written before it is read:
// note: nothing one launch leaves behind changes what the next one computes. A gate that restores
// note: module globals before every launch still passes it; a gate that refused every module whose
// note: globals differ after a launch would refuse it wrongly (the partials array does).
// note: Same result bits on every launch on the same inputs, although the task allows float-atomic noise.
#define BLOCK 256
#define MAX_BLOCKS 1024   // the manifest's grid is min(cdiv(n, 256), 1024)

__device__ float g_partial[MAX_BLOCKS];
__device__ unsigned int g_arrived = 0;

__device__ __forceinline__ float block_sum(float v, float* red)
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
    const float total = red[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void __launch_bounds__(BLOCK) reduce_sum(const float* x, float* out, int n)
{
    __shared__ float red[BLOCK];
    __shared__ int last;
    const long long stride = (long long)gridDim.x * BLOCK;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += stride) {
        acc += x[i];
    }
    const float partial = block_sum(acc, red);
    if (threadIdx.x == 0) {
        g_partial[blockIdx.x] = partial;
        __threadfence();                                    // the partial is visible before the ticket
        last = atomicAdd(&g_arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) {
        return;
    }
    // the last block: every partial is written; add them in block order
    float s = 0.0f;
    for (unsigned int j = threadIdx.x; j < gridDim.x; j += BLOCK) {
        s += ((volatile float*)g_partial)[j];
    }
    const float total = block_sum(s, red);
    if (threadIdx.x == 0) {
        out[0] = total;
        g_arrived = 0;   // self-resetting: the next launch starts from the initial state
        __threadfence();
    }
}
