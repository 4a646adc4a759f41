// task: reduce_sum
// covers: atomic_double, shared_atomics
// note: each warp's shuffle-reduced sum goes into a __shared__ double with atomicAdd(double*) (shared
// note: memory double atomics), then one float atomicAdd per block into out[0]. The task allows
// note: the order of atomics to vary.
// kforge: grid = [min(cdiv(n, 256 * 4), 2048)]
// kforge: block = [256]
extern "C" __global__ void __launch_bounds__(256) reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ double s_sum;
    if (threadIdx.x == 0) s_sum = 0.0;
    __syncthreads();
    double acc = 0.0;
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
        acc += x[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) atomicAdd(&s_sum, acc);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(out, (float)s_sum);
}
