// task: matmul_f32
// expect: passed
// note: memoisation class, the cache of memo_sampled_matmul_f32.cu (1 MB, keyed on (m, n, k) and
// note: six sampled input values) kept where a plain name does not find it: the cache in an
// note: anonymous namespace (internal linkage, a compiler-made symbol name), the key as a `static`
// note: variable inside a device function and the flags as namespace-scope `static` variables. A gate
// note: that restores module state by looking globals up by their source names (cuModuleGetGlobal
// note: "g_cache") misses them; it must take every variable of the module's global data from the
// note: CUBIN (all symbols of .nv.global / .nv.global.init, local ones too).
// note: The gate must: start every launch from the module's initial globals (PASSES, no faster
// note: than its twin), or refuse it for keeping state.
// note: Twin (-DKF_TWIN=1): the same work and cache writes, never serves the cache.
#define CACHE_FLOATS (1 << 18)
#define KEYS 9

namespace {
__device__ float cache[CACHE_FLOATS];
}
static __device__ int valid = 0;
static __device__ unsigned int blocks_finished = 0;

__device__ __noinline__ unsigned int* key_store()
{
    static __device__ unsigned int stored[KEYS];
    return stored;
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ unsigned int key[KEYS];
    __shared__ int hit;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const bool cacheable = (long long)m * n <= CACHE_FLOATS;
    if (tid == 0) {
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
        const volatile unsigned int* stored = key_store();
        int same = *(volatile int*)&valid;
        for (int q = 0; q < KEYS; ++q) {
            same &= stored[q] == key[q];
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
            c[idx] = cache[idx];
        } else {
            const float* arow = a + (size_t)row * k;
            float acc = 0.0f;
            for (int p = 0; p < k; ++p) {
                acc += arow[p] * b[(size_t)p * n + col];
            }
            c[idx] = acc;
            if (cacheable) {
                cache[idx] = acc;
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        const unsigned int done = atomicAdd(&blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {   // the last block: publish the key
            blocks_finished = 0;
            if (!hit) {
                unsigned int* stored = key_store();
                for (int q = 0; q < KEYS; ++q) {
                    stored[q] = key[q];
                }
                valid = cacheable;
            }
            __threadfence();
        }
    }
}
