// reduce_sum: out[0] = sum of x[0..n).  `out` is reset to zero before every launch.
// Naive initial kernel: each thread accumulates a grid-stride slice in a register, then adds it
// to out[0] with one atomicAdd; launched with the manifest's grid = [min(cdiv(n, 256), 1024)],
// block = [256].  Float atomics make the summation order (and the last bits) vary run to run.
extern "C" __global__ void reduce_sum(const float* x, float* out, int n)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        acc += x[i];
    }
    atomicAdd(out, acc);
}
