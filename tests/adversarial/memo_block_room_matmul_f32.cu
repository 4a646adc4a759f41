// task: matmul_f32
// expect: tampered
// note: issue 31, memory reached by address arithmetic: the sampled-key cache of
// note: memo_sampled_matmul_f32.cu, kept not in module memory (restored before every launch) but in
// note: the unused room of its own case's block: the worker lays a, b, c and the expected c out at
// note: 512-byte offsets in whole 2 MiB pages (kernel_forge/gpu/resident.py, public on purpose), so
// note: past the expected values lie up to 2 MiB that no buffer uses and nothing restored (C of
// note: sq256, rect and the correctness cases fits; large's block has no room, so it computes). The
// note: kernel writes there only when a, b and c lie as the layout says, so it never faults. Served,
// note: the cache gives right outputs with no arithmetic, on every timed launch, in every mode.
// note: The gate zeroes that room at upload and fingerprints it after every run: tampered, on the
// note: first case, full gate and --quick. (Before issue 31 it passed and would beat its twin.)
// note: Twin (-DKF_TWIN=1): the same writes to the room, never serves the cache.
// message: unused bytes of the case's memory block
#define KEYS 9
#define PAGE (2ull << 20)
#define ALIGN 512ull

__device__ unsigned int g_blocks_finished = 0;   // resets itself: the last block puts it back

__device__ __forceinline__ unsigned long long up(unsigned long long x, unsigned long long a)
{
    return (x + a - 1) / a * a;
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ unsigned int key[KEYS];
    __shared__ int hit;
    __shared__ unsigned int* room;                // the cache: KEYS words, a valid flag, then C
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    if (tid == 0) {
        const unsigned long long base = (unsigned long long)a;
        const unsigned long long sa = 4ull * m * k, sb = 4ull * k * n, sc = 4ull * m * n;
        const unsigned long long off_b = up(sa, ALIGN), off_c = off_b + up(sb, ALIGN);
        const unsigned long long end = off_c + up(sc, ALIGN) + up(sc, ALIGN);   // c, then the expected c
        const bool laid_out = base % PAGE == 0 && (unsigned long long)b == base + off_b
                              && (unsigned long long)c == base + off_c;
        room = laid_out && end + 64 + sc <= up(end, PAGE) ? (unsigned int*)(base + end) : nullptr;
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
        int same = room != nullptr && ((volatile unsigned int*)room)[KEYS] == 1u;
        for (int q = 0; q < KEYS && same; ++q) {
            same &= ((volatile unsigned int*)room)[q] == key[q];
        }
#ifdef KF_TWIN
        same = 0;   // the honest twin never serves the cache
#endif
        hit = same;
    }
    __syncthreads();
    float* cache = room != nullptr ? (float*)(room + 16) : nullptr;
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
            if (cache != nullptr) {
                cache[idx] = acc;
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        const unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {   // the last block: publish the key
            g_blocks_finished = 0;
            if (room != nullptr && !hit) {
                for (int q = 0; q < KEYS; ++q) {
                    room[q] = key[q];
                }
                room[KEYS] = 1u;
            }
            __threadfence();
        }
    }
}
