// task: softmax_rows
// covers: template_kernel, template, launch_bounds
// note: written as serving code writes kernels: a __global__ template over the element type and the
// note: warps a block holds, its __launch_bounds__ from a template parameter, a templated __device__
// note: helper; the file names the instance to run. A warp per row, an online max and sum.
// kforge: instance softmax_rows<float, 4>
// kforge: grid = [cdiv(rows, 4)]
// kforge: block = [128]
template <typename T>
__device__ __forceinline__ T warp_all_max(T v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <typename T>
__device__ __forceinline__ T warp_all_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename scalar_t, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
softmax_rows(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int rows, int cols)
{
    const int row = blockIdx.x * WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const scalar_t* xr = x + (long long)row * cols;
    float m = -INFINITY, s = 0.0f;
    for (int j = lane; j < cols; j += 32) {
        const float v = (float)xr[j], nm = fmaxf(m, v);
        s = s * expf(m - nm) + expf(v - nm);
        m = nm;
    }
    const float gm = warp_all_max(m);
    s = warp_all_sum(m == -INFINITY ? 0.0f : s * expf(m - gm));
    scalar_t* yr = y + (long long)row * cols;
    for (int j = lane; j < cols; j += 32) yr[j] = (scalar_t)(expf((float)xr[j] - gm) / s);
}
