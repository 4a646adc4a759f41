// task: layernorm
// covers: cub, struct_reduce, double
// note: one block per row; each thread accumulates (sum, sum of squares) of its columns in double,
// note: cub::BlockReduce reduces the struct with a custom + ; thread 0 turns it into mean and
// note: 1/sqrt(var + eps) in shared memory for the whole block.
// kforge: grid = [rows]
// kforge: block = [256]
#include <cub/block/block_reduce.cuh>

struct Moments {
    double s, q;
};

struct AddMoments {
    __device__ __forceinline__ Moments operator()(const Moments& a, const Moments& b) const
    {
        return Moments{a.s + b.s, a.q + b.q};
    }
};

extern "C" __global__ void __launch_bounds__(256) layernorm(const float* __restrict__ x, const float* __restrict__ gamma,
                                                            const float* __restrict__ beta, float* __restrict__ y,
                                                            int rows, int cols, float eps)
{
    typedef cub::BlockReduce<Moments, 256> Reduce;
    __shared__ Reduce::TempStorage temp;
    __shared__ float s_mean, s_rstd;
    const int row = blockIdx.x;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    Moments m{0.0, 0.0};
    for (int j = threadIdx.x; j < cols; j += 256) {
        const double v = xr[j];
        m.s += v;
        m.q += v * v;
    }
    const Moments t = Reduce(temp).Reduce(m, AddMoments());
    if (threadIdx.x == 0) {
        const double mean = t.s / cols;
        double var = t.q / cols - mean * mean;
        var = var > 0.0 ? var : 0.0;
        s_mean = (float)mean;
        s_rstd = (float)(1.0 / sqrt(var + (double)eps));
    }
    __syncthreads();
    const float mean = s_mean, rstd = s_rstd;
    for (int j = threadIdx.x; j < cols; j += 256) {
        yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
    }
}
