// task: softmax_rows
// covers: cpp_linkage, launch_bounds
// note: written as llm.c writes kernels: C++ linkage (no extern "C"), a forward declaration before
// note: the definition, a __device__ helper; a warp per row, an online max and sum, shuffles.
// kforge: grid = [cdiv(rows, 8)]
// kforge: block = [256]
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void softmax_rows(const float* x, float* y, int rows, int cols);

__global__ void __launch_bounds__(256) softmax_rows(const float* x, float* y, int rows, int cols)
{
    const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* xr = x + (long long)row * cols;
    float m = -INFINITY, s = 0.0f;
    for (int j = lane; j < cols; j += 32) {
        const float v = xr[j], nm = fmaxf(m, v);
        s = s * expf(m - nm) + expf(v - nm);
        m = nm;
    }
    const float gm = warp_max(m);
    s = warp_sum(m == -INFINITY ? 0.0f : s * expf(m - gm));
    float* yr = y + (long long)row * cols;
    for (int j = lane; j < cols; j += 32) yr[j] = expf(xr[j] - gm) / s;
}
