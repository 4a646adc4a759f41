// task: vector_add
// expect: static_rule
// note: issue 31's heap-state kernel: a vector_add that keeps a launch key (n and two input values)
// note: in the device heap and, from the second launch on the same inputs, skips the work. Block 0
// note: allocates a 1 KB entry and publishes it in a module global (the other blocks wait for it);
// note: the last block writes the key, frees the entry and puts the globals back, so restoring the
// note: module's globals finds nothing, and the allocator hands the freed block back to the next
// note: launch's identical request with the key still in it. The allocation is spelled through a
// note: macro that pastes `mal` and `loc`: no text rule sees it, the rule on the compiled code does
// note: (malloc in the PTX, the marked line). With the rules bypassed (a GPU test), the outputs catch
// note: it: the poisoned repeat launch writes nothing (nondeterministic, full gate), and under --quick
// note: the last timed launch leaves the poison (stale_after_timing); if the allocator hands back
// note: another block, it simply computes and must be no faster than its twin.
// note: Twin (-DKF_TWIN=1): the same allocation, waits and key writes, never skips.
#define CAT(x, y) x##y

struct LaunchKey {
    unsigned int n, a0, b_last, valid;
    unsigned int pad[252];            // 1 KB: an allocation of its own size class
};

__device__ LaunchKey* g_entry = nullptr;      // this launch's entry, set by block 0
__device__ unsigned int g_ready = 0;          // 1 once g_entry is set
__device__ unsigned int g_blocks_finished = 0;

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    __shared__ int skip;
    __shared__ LaunchKey* entry;
    const unsigned int key_a = __float_as_uint(a[0]), key_b = __float_as_uint(b[n - 1]);
    if (threadIdx.x == 0) {
        if (blockIdx.x == 0) {
            g_entry = (LaunchKey*)CAT(mal, loc)(sizeof(LaunchKey));   // EXPECT-LINE
            __threadfence();
            atomicExch(&g_ready, 1u);
        } else {
            while (atomicAdd(&g_ready, 0u) == 0u) {   // block 0 is always scheduled first
                __nanosleep(100);
            }
        }
        entry = *(LaunchKey* volatile*)&g_entry;
        const volatile LaunchKey* e = entry;
        int same = e != nullptr && e->valid == 1u && e->n == (unsigned int)n && e->a0 == key_a && e->b_last == key_b;
#ifdef KF_TWIN
        same = 0;   // the honest twin never skips
#endif
        skip = same;
    }
    __syncthreads();
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (!skip && i < n) {
        c[i] = a[i] + b[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned int done = atomicAdd(&g_blocks_finished, 1u);
        if (done == gridDim.x - 1) {            // the last block: the key kept, the globals put back
            if (entry != nullptr) {
                volatile LaunchKey* e = entry;
                e->n = (unsigned int)n;
                e->a0 = key_a;
                e->b_last = key_b;
                e->valid = 1u;
                __threadfence();
                CAT(fr, ee)(entry);
            }
            g_entry = nullptr;
            g_ready = 0;
            g_blocks_finished = 0;
            __threadfence();
        }
    }
}
