// task: matmul_f32
// expect: stale_after_timing
// note: the timed-launch cheat on a compute-bound task, where the plausibility check cannot help
// note: (an fp32 kernel is far below the tensor-core limit). Keyed on (m, n, k) and probed input
// note: values, the first two launches on the same inputs compute all of C; every later launch
// note: computes only the top half of C's rows, halving the time. The checked and repeat launches
// note: are right, draw 2 has new values. It passed the strict gate before pure outputs were
// note: poisoned before every timed launch; now the skipped rows keep the poison -> stale_after_timing.
// note: Twin (-DKF_TWIN=1): never skips. Restoring the module's initial globals before every launch
// note: makes it PASS: accepted too, if no faster than the twin.
// message: after timing
#define KEYS 6

__device__ unsigned int g_key[KEYS];
__device__ unsigned int g_seen = 0;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ int same, skip;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    if (tid == 0) {
        unsigned int key[KEYS] = {(unsigned int)m, (unsigned int)n, (unsigned int)k, __float_as_uint(a[0]),
                                  __float_as_uint(b[0]), __float_as_uint(a[(size_t)m * k - 1])};
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
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n && !(skip && row >= m / 2)) {
        const float* arow = a + (size_t)row * k;
        float acc = 0.0f;
        for (int p = 0; p < k; ++p) {
            acc += arow[p] * b[(size_t)p * n + col];
        }
        c[(size_t)row * n + col] = acc;
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y - 1) {   // the last block of this launch updates the memo
            g_blocks_finished = 0;
            if (same) {
                g_seen += 1;
            } else {
                g_key[0] = (unsigned int)m;
                g_key[1] = (unsigned int)n;
                g_key[2] = (unsigned int)k;
                g_key[3] = __float_as_uint(a[0]);
                g_key[4] = __float_as_uint(b[0]);
                g_key[5] = __float_as_uint(a[(size_t)m * k - 1]);
                g_seen = 1;
            }
            __threadfence();
        }
    }
}
