// task: reduce_sum
// expect: launch_config
// note: asks for 2048 threads per block through its kforge header (a block reduction sized for
// note: "more parallelism"). The code is fine and compiles, but no CUDA GPU allows more than 1024
// note: threads per block: the worker's launch-limit check refuses it before launching ->
// note: launch_config (the worker survives; no sticky error).
// message: 2048 threads
// kforge: grid = [min(cdiv(n, 2048), 512)]
// kforge: block = [2048]
#define THREADS 2048

extern "C" __global__ void reduce_sum(const float* x, float* out, int n)
{
    __shared__ float red[THREADS];
    long long stride = (long long)gridDim.x * THREADS;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride) {
        acc += x[i];
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            red[threadIdx.x] += red[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(out, red[0]);
    }
}
