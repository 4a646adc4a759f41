// task: matmul_f32
// expect: passed
// note: memoisation class, the kernel of issue 10 ("state kept between launches"). It keeps a copy
// note: of C in a 1 MB module-scope __device__ array, keyed on (m, n, k) and a sample of six input
// note: values (first, middle and last element of a and of b). A launch whose key matches the last
// note: published one copies C from the cache; otherwise it computes C (the initial kernel's loop)
// note: and stores it in the cache too; the last block to finish publishes the key. It writes all of
// note: C on every launch (poisoning cannot catch it) and is always correct (a fresh seed changes
// note: the sample). Every repeated launch on the same inputs only copies: the old gate passed it
// note: 2.9x (sq256) and 3.4x (rect) faster than the initial kernel.
// note: The gate must: start every launch from the module's initial globals (then the cache never
// note: hits and this PASSES, no faster than its twin), or refuse it for keeping state.
// note: Twin (-DKF_TWIN=1): the same work, key and cache writes included, but it never serves the cache.
#define CACHE_FLOATS (1 << 18)   // 1 MB: C of sq256 (256 KB) and of rect (384 KB) fit, large's does not
#define KEYS 9

__device__ float g_cache[CACHE_FLOATS];
__device__ unsigned int g_key[KEYS];
__device__ int g_valid = 0;
__device__ unsigned int g_blocks_finished = 0;

__device__ __forceinline__ void sample_key(unsigned int* key, const float* a, const float* b, int m, int n, int k)
{
    const size_t na = (size_t)m * k, nb = (size_t)k * n;
    key[0] = (unsigned int)m;
    key[1] = (unsigned int)n;
    key[2] = (unsigned int)k;
    key[3] = __float_as_uint(a[0]);
    key[4] = __float_as_uint(a[na / 2]);
    key[5] = __float_as_uint(a[na - 1]);
    key[6] = __float_as_uint(b[0]);
    key[7] = __float_as_uint(b[nb / 2]);
    key[8] = __float_as_uint(b[nb - 1]);
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ unsigned int key[KEYS];
    __shared__ int hit;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const bool cacheable = (long long)m * n <= CACHE_FLOATS;
    if (tid == 0) {
        sample_key(key, a, b, m, n, k);
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
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n) {
        const size_t idx = (size_t)row * n + col;
        if (hit) {
            c[idx] = g_cache[idx];
        } else {
            const float* arow = a + (size_t)row * k;
            float acc = 0.0f;
            for (int p = 0; p < k; ++p) {
                acc += arow[p] * b[(size_t)p * n + col];
            }
            c[idx] = acc;
            if (cacheable) {
                g_cache[idx] = acc;
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
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
