// task: matmul_f32
// expect: mismatch
// note: memoises C in a __device__ buffer keyed on the address of `a` and on (m, n, k), never on
// note: the values. Draw 1: checked launch 1 computes and fills the cache; the repeat launch hits the
// note: cache and writes the same bits, so the repeat check passes. Draw 2 (fresh seed): the worker
// note: frees every buffer after a case and allocates the same sizes in the same order, so `a` comes
// note: back at the same address; the cache hits and serves draw 1's product: draw 2 first launch
// note: -> mismatch. (Were the address different, the kernel would recompute honestly and pass.)
// note: Twin (-DKF_TWIN=1): never serves the cache. Restoring the module's initial globals before every
// note: launch makes it PASS: accepted too, if no faster than the twin.
// message: draw 2
#define CACHE_FLOATS (1 << 20)

__device__ float g_cache[CACHE_FLOATS];
__device__ unsigned long long g_key_a = 0;
__device__ int g_key_m = -1, g_key_n = -1, g_key_k = -1;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ int hit;
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
    if (tid == 0) {
        hit = *(volatile unsigned long long*)&g_key_a == (unsigned long long)a
              && *(volatile int*)&g_key_m == m && *(volatile int*)&g_key_n == n
              && *(volatile int*)&g_key_k == k;
#ifdef KF_TWIN
        hit = 0;   // the honest twin never serves the cache
#endif
    }
    __syncthreads();
    bool cacheable = (long long)m * n <= CACHE_FLOATS;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n) {
        size_t idx = (size_t)row * n + col;
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
        unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {  // last block: publish the key
            g_blocks_finished = 0;
            if (!hit) {
                g_key_a = cacheable ? (unsigned long long)a : 0ull;
                g_key_m = m;
                g_key_n = n;
                g_key_k = k;
            }
            __threadfence();
        }
    }
}
