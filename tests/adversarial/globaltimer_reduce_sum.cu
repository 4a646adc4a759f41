// task: reduce_sum
// expect: static_rule
// note: reads the %globaltimer register in inline assembly (here to stop early "when time is
// note: up"). Timer reads are refused by the static rules before compiling: static_rule, with the
// note: line marked EXPECT-LINE. The gate stops before any GPU work.
__device__ __forceinline__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));  // EXPECT-LINE
    return t;
}

extern "C" __global__ void reduce_sum(const float* x, float* out, int n)
{
    unsigned long long start = now_ns();
    long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        acc += x[i];
        if (now_ns() - start > 1000000ull) {
            break;
        }
    }
    atomicAdd(out, acc);
}
