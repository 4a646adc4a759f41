// task: matmul_f32
// expect: passed
// note: memoisation class, a multi-slot cache: four 1 MB slots, each with its own sampled key
// note: ((m, n, k) and six input values, as in memo_sampled_matmul_f32.cu). A launch served by any
// note: slot copies C from it; a miss computes C, fills the next slot in round-robin order, and the
// note: last block publishes that slot's key. So several (case, seed) draws stay cached at once:
// note: a gate that only forgets the most recent entry, or interleaves draws, cases or candidates,
// note: still sees hits. Writes all of C every launch, always correct.
// note: The gate must: start every launch from the module's initial globals (no slot is ever valid:
// note: PASSES, no faster than its twin), or refuse it for keeping state.
// note: Twin (-DKF_TWIN=1): the same work and slot writes, never served from a slot.
#define SLOTS 4
#define SLOT_FLOATS (1 << 18)   // 1 MB a slot
#define KEYS 9

__device__ float g_slot_data[SLOTS][SLOT_FLOATS];
__device__ unsigned int g_slot_key[SLOTS][KEYS];
__device__ int g_slot_valid[SLOTS];
__device__ unsigned int g_next = 0;
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
    __shared__ int slot, hit;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const bool cacheable = (long long)m * n <= SLOT_FLOATS;
    if (tid == 0) {
        sample_key(key, a, b, m, n, k);
        int found = -1;
        for (int s = 0; s < SLOTS && found < 0; ++s) {
            int same = ((volatile int*)g_slot_valid)[s];
            for (int q = 0; q < KEYS; ++q) {
                same &= ((volatile unsigned int*)g_slot_key[s])[q] == key[q];
            }
            if (same) {
                found = s;
            }
        }
#ifdef KF_TWIN
        found = -1;   // the honest twin never serves a slot
#endif
        hit = found >= 0 && cacheable;
        // g_next changes only at the end of a launch, after every block has read it
        slot = hit ? found : (int)(*(volatile unsigned int*)&g_next % SLOTS);
    }
    __syncthreads();
    float* data = g_slot_data[slot];
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < m && col < n) {
        const size_t idx = (size_t)row * n + col;
        if (hit) {
            c[idx] = data[idx];
        } else {
            const float* arow = a + (size_t)row * k;
            float acc = 0.0f;
            for (int p = 0; p < k; ++p) {
                acc += arow[p] * b[(size_t)p * n + col];
            }
            c[idx] = acc;
            if (cacheable) {
                data[idx] = acc;
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        const unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x * gridDim.y * gridDim.z - 1) {   // the last block: publish the slot
            g_blocks_finished = 0;
            if (!hit && cacheable) {
                for (int q = 0; q < KEYS; ++q) {
                    g_slot_key[slot][q] = key[q];
                }
                g_slot_valid[slot] = 1;
                g_next = slot + 1;
            }
            __threadfence();
        }
    }
}
