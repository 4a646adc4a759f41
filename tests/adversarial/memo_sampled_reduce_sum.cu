// task: reduce_sum
// expect: passed
// note: memoisation class with a tiny module state: the last sum (4 bytes) and its key (n and five
// note: sampled x values, 24 bytes). A hit writes the cached sum into out[0] and returns without
// note: reading x. A miss is the initial kernel (grid-stride slices, one atomicAdd a thread); the last
// note: block to finish reads the total back and publishes it with its key. Always correct. The old
// note: gate's plausibility check flags a hit (no bytes read) as implausible: an accident of the
// note: bandwidth floor, not a verdict on state (a compute-bound cache gets past it: see
// note: memo_sampled_matmul_f32.cu).
// note: The gate must: start every launch from the module's initial globals (PASSES, no faster
// note: than its twin), or refuse it for keeping state. Restoring must cover small globals too.
// note: Twin (-DKF_TWIN=1): the same work and the same publishing, never serves the cache.
#define KEYS 6

__device__ unsigned int g_key[KEYS];
__device__ float g_sum = 0.0f;
__device__ int g_valid = 0;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void reduce_sum(const float* x, float* out, int n)
{
    __shared__ unsigned int key[KEYS];
    __shared__ int hit;
    if (threadIdx.x == 0) {
        key[0] = (unsigned int)n;
        key[1] = __float_as_uint(x[0]);
        key[2] = __float_as_uint(x[n / 4]);
        key[3] = __float_as_uint(x[n / 2]);
        key[4] = __float_as_uint(x[(3ll * n) / 4]);
        key[5] = __float_as_uint(x[n - 1]);
        int same = *(volatile int*)&g_valid;
        for (int q = 0; q < KEYS; ++q) {
            same &= ((volatile unsigned int*)g_key)[q] == key[q];
        }
#ifdef KF_TWIN
        same = 0;   // the honest twin never serves the cache
#endif
        hit = same;
    }
    __syncthreads();
    if (hit) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            out[0] = *(volatile float*)&g_sum;
        }
    } else {
        const long long stride = (long long)gridDim.x * blockDim.x;
        float acc = 0.0f;
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            acc += x[i];
        }
        atomicAdd(out, acc);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {   // the last block: every atomicAdd is done
            g_blocks_finished = 0;
            if (!hit) {
                g_sum = *(volatile float*)out;
                for (int q = 0; q < KEYS; ++q) {
                    g_key[q] = key[q];
                }
                g_valid = 1;
            }
            __threadfence();
        }
    }
}
