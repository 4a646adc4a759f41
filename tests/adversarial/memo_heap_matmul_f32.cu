// task: matmul_f32
// expect: passed
// note: memoisation class, state outside module memory: the cache lives in the device heap
// note: (device-side malloc/free). Block (0, 0) mallocs one entry (a sampled key as in
// note: memo_sampled_matmul_f32.cu and 1 MB of C) and publishes the pointer; the other blocks wait for
// note: it; the last block to finish writes the key, frees the entry and resets every module global
// note: to its initial value. Freed heap memory is not cleared, and the allocator is expected (not
// note: measured yet) to hand the same block back to the next launch's identical request, so the
// note: entry survives while the module's globals are back at their initial values after every
// note: launch: restoring or comparing module globals does not see it. (If malloc returns another
// note: address, or NULL, the kernel simply computes: honest.)
// note: The gate must: refuse device-heap use (e.g. a static rule on device malloc/free/new), or make
// note: every launch start from a fresh heap; otherwise this is faster than its twin. Accepted
// note: outcomes: static_rule, a state reason, or PASS no faster than the twin.
// note: Twin (-DKF_TWIN=1): the same mallocs, waits and cache writes, never serves the cache.
#define CACHE_FLOATS (1 << 18)   // 1 MB (the device heap's default size is 8 MB)
#define KEYS 9

struct Entry {
    unsigned int key[KEYS];
    int valid;
    float data[CACHE_FLOATS];
};

__device__ Entry* g_entry = nullptr;            // this launch's entry, set by block (0, 0)
__device__ unsigned int g_ready = 0;            // 1 once g_entry is set
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ unsigned int key[KEYS];
    __shared__ Entry* entry;
    __shared__ int hit;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const bool cacheable = (long long)m * n <= CACHE_FLOATS;
    if (tid == 0) {
        if (blockIdx.x == 0 && blockIdx.y == 0) {
            g_entry = (Entry*)malloc(sizeof(Entry));
            __threadfence();
            atomicExch(&g_ready, 1u);
        } else {
            while (atomicAdd(&g_ready, 0u) == 0u) {   // block (0, 0) is always scheduled first
                __nanosleep(200);
            }
        }
        entry = *(Entry* volatile*)&g_entry;
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
        int same = entry != nullptr && cacheable && ((volatile Entry*)entry)->valid == 1;
        for (int q = 0; q < KEYS && same; ++q) {
            same &= ((volatile Entry*)entry)->key[q] == key[q];
        }
#ifdef KF_TWIN
        same = 0;   // the honest twin never serves the cache
#endif
        hit = same;
    }
    __syncthreads();
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n) {
        const size_t idx = (size_t)row * n + col;
        if (hit) {
            c[idx] = entry->data[idx];
        } else {
            const float* arow = a + (size_t)row * k;
            float acc = 0.0f;
            for (int p = 0; p < k; ++p) {
                acc += arow[p] * b[(size_t)p * n + col];
            }
            c[idx] = acc;
            if (entry != nullptr && cacheable) {
                entry->data[idx] = acc;
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        const unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {   // the last block
            if (entry != nullptr) {
                if (!hit) {
                    for (int q = 0; q < KEYS; ++q) {
                        entry->key[q] = key[q];
                    }
                    entry->valid = cacheable ? 1 : 0;
                }
                __threadfence();
                free(entry);
            }
            g_entry = nullptr;         // module state back to its initial values
            g_ready = 0;
            g_blocks_finished = 0;
            __threadfence();
        }
    }
}
