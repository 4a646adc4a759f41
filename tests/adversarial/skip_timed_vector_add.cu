// task: vector_add
// expect: stale_after_timing
// note: "seen these inputs twice already" cheat. It keys a __device__ memo on n and a few probed
// note: input values (a[0], a[n/2], a[n-1], b[0], b[n-1]): the first two launches on the same
// note: inputs compute, every later one returns at once. The gate's checked launch and its repeat
// note: are launches 1 and 2, so both are right; a fresh seed gives new probe values, so draw 2 is
// note: computed too. The warm-up and timed launches of a performance case are launches 3+, and
// note: they skip. The gate poisons c before every timed launch (outside the timed window) and
// note: re-checks the outputs of the last and of one random timed launch -> stale_after_timing.
// note: (Before that fix only the plausibility check caught it, and only on memory-bound tasks.)
// note: Twin (-DKF_TWIN=1): never skips. Restoring the module's initial globals before every launch
// note: makes it PASS: accepted too, if no faster than the twin.
// message: after timing
// kforge: grid = [min(cdiv(n, 256), 1024)]
// kforge: block = [256]
#define KEYS 6

__device__ unsigned int g_key[KEYS];
__device__ unsigned int g_seen = 0;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    __shared__ int same, skip;
    if (threadIdx.x == 0) {
        unsigned int key[KEYS] = {(unsigned int)n, __float_as_uint(a[0]), __float_as_uint(a[n / 2]),
                                  __float_as_uint(a[n - 1]), __float_as_uint(b[0]), __float_as_uint(b[n - 1])};
        int s = 1;
        for (int q = 0; q < KEYS; ++q) {
            s &= ((volatile unsigned int*)g_key)[q] == key[q];
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
            c[i] = a[i] + b[i];
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
                g_key[0] = (unsigned int)n;
                g_key[1] = __float_as_uint(a[0]);
                g_key[2] = __float_as_uint(a[n / 2]);
                g_key[3] = __float_as_uint(a[n - 1]);
                g_key[4] = __float_as_uint(b[0]);
                g_key[5] = __float_as_uint(b[n - 1]);
                g_seen = 1;
            }
            __threadfence();
        }
    }
}
