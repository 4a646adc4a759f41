// task: softmax_rows
// covers: cub
// note: one warp per row; cub::WarpReduce finds the row's maximum (a custom max functor) and the
// note: sum of exponentials; lane 0's result is broadcast with __shfl_sync. __syncwarp() between
// note: the two reductions, which share the warp's temporary storage (CUB's rule).
// kforge: grid = [cdiv(rows, 8)]
// kforge: block = [256]
#include <cub/warp/warp_reduce.cuh>

struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

extern "C" __global__ void __launch_bounds__(256) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                               int rows, int cols)
{
    typedef cub::WarpReduce<float> WarpReduce;
    __shared__ WarpReduce::TempStorage temp[8];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * 8 + warp;
    if (row >= rows) {
        return;                          // the whole warp leaves together: only warp-level primitives follow
    }
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    float m = -__int_as_float(0x7f800000);
    for (int j = lane; j < cols; j += 32) {
        m = fmaxf(m, xr[j]);
    }
    m = WarpReduce(temp[warp]).Reduce(m, MaxOp());
    m = __shfl_sync(0xffffffffu, m, 0);
    __syncwarp();
    float s = 0.0f;
    for (int j = lane; j < cols; j += 32) {
        s += expf(xr[j] - m);
    }
    s = WarpReduce(temp[warp]).Sum(s);
    s = __shfl_sync(0xffffffffu, s, 0);
    for (int j = lane; j < cols; j += 32) {
        yr[j] = expf(xr[j] - m) / s;
    }
}
