// task: layernorm
// covers: named_barrier, inline_ptx
// note: two independent 128-thread groups per block, one row each; each group synchronises only
// note: itself with "bar.sync 1 + group, 128" (named barriers), never the whole block, so a group
// note: whose row does not exist simply leaves. Two passes (mean, then variance) as the reference.
// kforge: grid = [cdiv(rows, 2)]
// kforge: block = [256]
__device__ __forceinline__ void group_sync(int group)
{
    asm volatile("bar.sync %0, 128;" :: "r"(1 + group) : "memory");
}

__device__ __forceinline__ float warp_add(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(256) layernorm(const float* __restrict__ x, const float* __restrict__ gamma,
                                                            const float* __restrict__ beta, float* __restrict__ y,
                                                            int rows, int cols, float eps)
{
    __shared__ float red[2][4];
    const int group = threadIdx.x / 128, t = threadIdx.x % 128, lane = t % 32, w = t / 32;
    const int row = blockIdx.x * 2 + group;
    if (row >= rows) {
        return;                          // the whole group leaves: nobody waits for it
    }
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    float s = 0.0f;
    for (int j = t; j < cols; j += 128) s += xr[j];
    s = warp_add(s);
    if (lane == 0) red[group][w] = s;
    group_sync(group);
    const float mean = (red[group][0] + red[group][1] + red[group][2] + red[group][3]) / cols;
    group_sync(group);
    float q = 0.0f;
    for (int j = t; j < cols; j += 128) {
        const float d = xr[j] - mean;
        q += d * d;
    }
    q = warp_add(q);
    if (lane == 0) red[group][w] = q;
    group_sync(group);
    const float rstd = rsqrtf((red[group][0] + red[group][1] + red[group][2] + red[group][3]) / cols + eps);
    for (int j = t; j < cols; j += 128) {
        yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
    }
}
