// task: softmax_rows
// covers: dynamic_smem_above_48k
// note: one block per row; the row is read once into dynamic shared memory sized from the case
// note: (shared_mem = 4 * cols: 200 KB for the "wide" case, above the 48 KB default, so the gate
// note: must opt the kernel in with cuFuncSetAttribute), then max, exponentials and sum are taken
// note: from shared memory with warp shuffles.
// kforge: grid = [rows]
// kforge: block = [256]
// kforge: shared_mem = 4 * cols
#define BLOCK 256

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_add(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                                 int rows, int cols)
{
    extern __shared__ float row_buf[];
    __shared__ float red[BLOCK / 32];
    const int t = threadIdx.x, lane = t % 32, w = t / 32;
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    float m = -__int_as_float(0x7f800000);
    for (int j = t; j < cols; j += BLOCK) {
        const float v = xr[j];
        row_buf[j] = v;
        m = fmaxf(m, v);
    }
    m = warp_max(m);
    if (lane == 0) red[w] = m;
    __syncthreads();
    m = red[0];
    for (int k = 1; k < BLOCK / 32; ++k) m = fmaxf(m, red[k]);
    __syncthreads();
    float s = 0.0f;
    for (int j = t; j < cols; j += BLOCK) {
        const float e = expf(row_buf[j] - m);
        row_buf[j] = e;
        s += e;
    }
    s = warp_add(s);
    if (lane == 0) red[w] = s;
    __syncthreads();
    s = 0.0f;
    for (int k = 0; k < BLOCK / 32; ++k) s += red[k];
    for (int j = t; j < cols; j += BLOCK) {
        yr[j] = row_buf[j] / s;
    }
}
