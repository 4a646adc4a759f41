// task: vector_add
// expect: passed
// note: memoisation class on a memory-bound task: a 64 MB module array holds the last c, keyed on
// note: n and six sampled input values (first, middle, last of a and b). A hit copies c from the
// note: cache: 8 bytes moved per element instead of 12 (case n16M fits, n64M does not). A miss
// note: computes c and also stores it in the cache; the last block to finish publishes the key.
// note: Writes all of c every launch, always correct. The old gate may flag a hit's speed as
// note: implausible (it moves 2/3 of the bytes), which is an accident, not a verdict on state.
// note: The gate must: start every launch from the module's initial globals (PASSES, no faster
// note: than its twin), or refuse it for keeping state.
// note: Twin (-DKF_TWIN=1): the same work and cache writes, never serves the cache.
#define CACHE_FLOATS (1 << 24)   // 64 MB
#define KEYS 7

__device__ float g_cache[CACHE_FLOATS];
__device__ unsigned int g_key[KEYS];
__device__ int g_valid = 0;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    __shared__ unsigned int key[KEYS];
    __shared__ int hit;
    const bool cacheable = n <= CACHE_FLOATS;
    if (threadIdx.x == 0) {
        key[0] = (unsigned int)n;
        key[1] = __float_as_uint(a[0]);
        key[2] = __float_as_uint(a[n / 2]);
        key[3] = __float_as_uint(a[n - 1]);
        key[4] = __float_as_uint(b[0]);
        key[5] = __float_as_uint(b[n / 2]);
        key[6] = __float_as_uint(b[n - 1]);
        int same = *(volatile int*)&g_valid;
        for (int q = 0; q < KEYS; ++q) {
            same &= ((volatile unsigned int*)g_key)[q] == key[q];
        }
#ifdef KF_TWIN
        same = 0;   // the honest twin never serves the cache
#endif
        hit = same && cacheable;
    }
    __syncthreads();
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if (hit) {
            c[i] = g_cache[i];
        } else {
            const float v = a[i] + b[i];
            c[i] = v;
            if (cacheable) {
                g_cache[i] = v;
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {   // the last block: publish the key
            g_blocks_finished = 0;
            if (!hit) {
                for (int q = 0; q < KEYS; ++q) {
                    g_key[q] = key[q];
                }
                g_valid = cacheable;
            }
            __threadfence();
        }
    }
}
