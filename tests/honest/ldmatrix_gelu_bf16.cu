// task: gelu_bf16
// covers: ldmatrix, inline_ptx
// note: each warp treats 256 consecutive bf16 as a row-major 16 x 16 tile: 16 bytes per lane into
// note: shared memory, then ldmatrix.sync.aligned.m8n8.x4.shared.b16 hands every lane its four
// note: 8 x 8 fragments (lane l: row l / 4 and columns 2 (l % 4), +1 of each); GELU on the eight
// note: values and a 4-byte store each pair back at its (row, column). A partial last tile is done
// note: element by element. 4 warps per block, grid-stride over tiles.
// kforge: grid = [min(cdiv(n, 1024), 4096)]
// kforge: block = [128]
#include <cuda_bf16.h>

__device__ __forceinline__ float gelu(float v)
{
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + tanhf(u));
}

__device__ __forceinline__ unsigned int gelu_pair(unsigned int packed)
{
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&packed);
    const float2 f = __bfloat1622float2(h);
    h = __floats2bfloat162_rn(gelu(f.x), gelu(f.y));
    return *reinterpret_cast<unsigned int*>(&h);
}

extern "C" __global__ void __launch_bounds__(128) gelu_bf16(const __nv_bfloat16* __restrict__ x,
                                                            __nv_bfloat16* __restrict__ y, int n)
{
    __shared__ __align__(16) unsigned short tile[4][256];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const long long tiles = n / 256;
    for (long long t = (long long)blockIdx.x * 4 + w; t < tiles; t += (long long)gridDim.x * 4) {
        const long long base = t * 256;
        *reinterpret_cast<uint4*>(&tile[w][lane * 8]) = *reinterpret_cast<const uint4*>(x + base + lane * 8);
        __syncwarp();
        const unsigned int addr = (unsigned int)__cvta_generic_to_shared(&tile[w][(lane % 16) * 16 + (lane / 16) * 8]);
        unsigned int r[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
        __syncwarp();                   // the tile is free for the next iteration's stores
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int row = (q & 1) * 8 + lane / 4, col = (q >> 1) * 8 + (lane % 4) * 2;
            *reinterpret_cast<unsigned int*>(y + base + row * 16 + col) = gelu_pair(r[q]);
        }
    }
    // the last n % 256 elements, by the first block
    if (blockIdx.x == 0) {
        for (long long k = tiles * 256 + threadIdx.x; k < n; k += blockDim.x) {
            y[k] = __float2bfloat16(gelu(__bfloat162float(x[k])));
        }
    }
}
