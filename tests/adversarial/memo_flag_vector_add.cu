// task: vector_add
// expect: nondeterministic
// note: memoises across launches with a __device__ flag: the first launch computes c and its
// note: last block to finish sets g_done; every later launch returns at once. Checked launch 1 of
// note: draw 1 is correct, so the first-launch comparison passes; the repeat launch (outputs
// note: poisoned first) then writes nothing, so outputs_repeat (all poison) differ bit-for-bit from
// note: outputs and, vector_add being deterministic, the repeat check fires first: nondeterministic
// note: (for a task declared nondeterministic the repeat would be compared instead -> unwritten).
// note: The flag is set only by the last block of the launch, so no block of launch 1 skips.
// note: Twin (-DKF_TWIN=1): sets the flag the same way but never skips. Restoring the module's initial
// note: globals before every launch makes it PASS: accepted too, if no faster than the twin.
// message: differ bit-for-bit
__device__ int g_done = 0;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    __shared__ int skip;
    if (threadIdx.x == 0) {
        skip = *(volatile int*)&g_done;
#ifdef KF_TWIN
        skip = 0;   // the honest twin never skips
#endif
    }
    __syncthreads();
    if (skip) {
        return;  // "already computed"
    }
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {  // the last block of this launch
            g_blocks_finished = 0;
            *(volatile int*)&g_done = 1;
            __threadfence();
        }
    }
}
