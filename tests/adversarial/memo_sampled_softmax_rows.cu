// task: softmax_rows
// expect: passed
// note: memoisation class on softmax_rows: the initial kernel (one thread a row, three passes,
// note: expf) plus a 64 MB module array that holds the last y, keyed on (rows, cols) and five
// note: sampled x values. A hit copies the row from the cache (no max, no exp); both performance
// note: cases (16M elements each) fit. Writes all of y every launch, always correct; a hit moves
// note: the same 8 bytes per element that the task's cost counts, so plausibility cannot catch it.
// note: The gate must: start every launch from the module's initial globals (PASSES, no faster
// note: than its twin), or refuse it for keeping state.
// note: Twin (-DKF_TWIN=1): the same work and cache writes, never serves the cache.
#define CACHE_FLOATS (1 << 24)   // 64 MB
#define KEYS 7

__device__ float g_cache[CACHE_FLOATS];
__device__ unsigned int g_key[KEYS];
__device__ int g_valid = 0;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    __shared__ unsigned int key[KEYS];
    __shared__ int hit;
    const long long total = (long long)rows * cols;
    const bool cacheable = total <= CACHE_FLOATS;
    if (threadIdx.x == 0) {
        key[0] = (unsigned int)rows;
        key[1] = (unsigned int)cols;
        key[2] = total > 0 ? __float_as_uint(x[0]) : 0u;
        key[3] = total > 0 ? __float_as_uint(x[total / 3]) : 0u;
        key[4] = total > 0 ? __float_as_uint(x[total / 2]) : 0u;
        key[5] = total > 0 ? __float_as_uint(x[(2 * total) / 3]) : 0u;
        key[6] = total > 0 ? __float_as_uint(x[total - 1]) : 0u;
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
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows && cols > 0) {
        const float* xr = x + (size_t)row * cols;
        float* yr = y + (size_t)row * cols;
        float* cr = g_cache + (cacheable ? (size_t)row * cols : 0);
        if (hit) {
            for (int j = 0; j < cols; ++j) {
                yr[j] = cr[j];
            }
        } else {
            float mx = xr[0];
            for (int j = 1; j < cols; ++j) {
                mx = fmaxf(mx, xr[j]);
            }
            float sum = 0.0f;
            for (int j = 0; j < cols; ++j) {
                float e = expf(xr[j] - mx);
                yr[j] = e;
                sum += e;
            }
            const float inv = 1.0f / sum;
            for (int j = 0; j < cols; ++j) {
                const float v = yr[j] * inv;
                yr[j] = v;
                if (cacheable) {
                    cr[j] = v;
                }
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
