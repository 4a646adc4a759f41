// task: gelu_bf16
// covers: mma_sync, ldmatrix, cp_async, inline_ptx
// note: tensor cores on a bf16 elementwise task, exactly: each warp stages a 16 x 16 bf16 tile with
// note: cp.async, loads it as the A operand with ldmatrix.x4, and multiplies it by the two 16 x 8
// note: halves of the identity with mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: D = A
// note: in float32, exact (one product by 1, sums of zeros). GELU on the accumulator fragments
// note: (rows g and g + 8, columns 2t, 2t + 1 of each half; g = lane / 4, t = lane % 4), stored in
// note: pairs. A partial last tile is done element by element.
// kforge: grid = [min(cdiv(n, 1024), 4096)]
// kforge: block = [128]
#include <cuda_bf16.h>

__device__ __forceinline__ float gelu(float v)
{
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + tanhf(u));
}

__device__ __forceinline__ unsigned int bf16_pair(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned int*>(&h);
}

extern "C" __global__ void __launch_bounds__(128) gelu_bf16(const __nv_bfloat16* __restrict__ x,
                                                            __nv_bfloat16* __restrict__ y, int n)
{
    __shared__ __align__(16) unsigned short tile[4][256];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int g = lane / 4, tq = lane % 4;
    // B fragments of the identity's two 16 x 8 halves: b0 holds rows 2t, 2t+1 of column g, b1 rows
    // 2t+8, 2t+9: half 0 is I[:, 0:8] (ones where row == g), half 1 is I[:, 8:16] (row == g + 8)
    const unsigned int ones = bf16_pair(2 * tq == g ? 1.0f : 0.0f, 2 * tq + 1 == g ? 1.0f : 0.0f);
    const unsigned int b_half0[2] = {ones, 0u};
    const unsigned int b_half1[2] = {0u, ones};
    const long long tiles = n / 256;
    for (long long t = (long long)blockIdx.x * 4 + w; t < tiles; t += (long long)gridDim.x * 4) {
        const long long base = t * 256;
        const unsigned int dst = (unsigned int)__cvta_generic_to_shared(&tile[w][lane * 8]);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(x + base + lane * 8) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncwarp();
        const unsigned int addr = (unsigned int)__cvta_generic_to_shared(&tile[w][(lane % 16) * 16 + (lane / 16) * 8]);
        unsigned int a[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(addr));
        __syncwarp();
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const unsigned int* b = half == 0 ? b_half0 : b_half1;
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
            const int col = half * 8 + 2 * tq;
            *reinterpret_cast<unsigned int*>(y + base + g * 16 + col) = bf16_pair(gelu(d[0]), gelu(d[1]));
            *reinterpret_cast<unsigned int*>(y + base + (g + 8) * 16 + col) = bf16_pair(gelu(d[2]), gelu(d[3]));
        }
    }
    if (blockIdx.x == 0) {
        for (long long k = tiles * 256 + threadIdx.x; k < n; k += blockDim.x) {
            y[k] = __float2bfloat16(gelu(__bfloat162float(x[k])));
        }
    }
}
