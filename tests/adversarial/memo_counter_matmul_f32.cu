// task: matmul_f32
// expect: mismatch
// note: memoisation class, keyed on a launch counter (and the sizes), never on the values: one
// note: launch in PERIOD computes C, the PERIOD - 1 launches after it replay that C. The strict gate
// note: makes two launches per draw (checked, repeat), so draw 1's repeat is a replay of the same
// note: inputs (same bits: passes), and draw 2's first launch, on a fresh seed, is served draw 1's
// note: product: "draw 2" mismatch on the first correctness case, "odd". (A period of 2 would pass
// note: the correctness cases and be caught only when the gate's random warm-up count makes a
// note: performance case's draw 2 start on a replay.)
// note: With every launch started from the module's initial globals the counter always reads 0,
// note: every launch computes and it PASSES, no faster than its twin; both outcomes are accepted.
// note: g_sizes starts at -1, not 0: restoring "initial globals" means the module image, not zeros.
// note: Twin (-DKF_TWIN=1): counts and fills the cache the same way, never replays.
// message: draw 2
#define PERIOD 4
#define CACHE_FLOATS (1 << 18)   // 1 MB

__device__ float g_cache[CACHE_FLOATS];
__device__ int g_sizes[3] = {-1, -1, -1};
__device__ unsigned int g_launch = 0;
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ int replay;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const bool cacheable = (long long)m * n <= CACHE_FLOATS;
    if (tid == 0) {
        const volatile int* sizes = g_sizes;
        replay = cacheable && (*(volatile unsigned int*)&g_launch % PERIOD) != 0 && sizes[0] == m && sizes[1] == n
                 && sizes[2] == k;
#ifdef KF_TWIN
        replay = 0;   // the honest twin never replays
#endif
    }
    __syncthreads();
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n) {
        const size_t idx = (size_t)row * n + col;
        if (replay) {
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
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {   // the last block: count the launch
            g_blocks_finished = 0;
            g_sizes[0] = m;
            g_sizes[1] = n;
            g_sizes[2] = k;
            g_launch += 1;
            __threadfence();
        }
    }
}
