// task: matmul_f16
// covers: wmma, template
// note: the CUDA C++ WMMA API (nvcuda::wmma, mma.h): a block of 2 x 2 warps computes a 32 x 32 tile
// note: of C, each warp one 16 x 16 fp32 accumulator fragment; per 16-wide k-step the block stages
// note: the A (32 x 16) and B (16 x 32) slices in shared memory, zero-filled outside the matrices, so
// note: any m, n, k work; load_matrix_sync / mma_sync from there, then the accumulator goes through
// note: shared memory (store_matrix_sync) and each element is rounded to fp16 and stored if in range.
// kforge: grid = [cdiv(n, 32), cdiv(m, 32), 1]
// kforge: block = [128, 1, 1]
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

template <int TILE>
__device__ __forceinline__ void stage(__half (*dst)[TILE + 8], const __half* src, int rows, int cols, int ld,
                                      int r0, int c0, int nr, int nc)
{
    for (int i = threadIdx.x; i < nr * nc; i += blockDim.x) {
        const int r = i / nc, c = i % nc;
        const int gr = r0 + r, gc = c0 + c;
        dst[r][c] = (gr < rows && gc < cols) ? src[(size_t)gr * ld + gc] : __float2half(0.0f);
    }
}

extern "C" __global__ void __launch_bounds__(128)
matmul_f16(const __half* a, const __half* b, __half* c, int m, int n, int k)
{
    __shared__ __align__(32) __half As[32][16 + 8];     // rows padded by 8 halves (16 bytes)
    __shared__ __align__(32) __half Bs[16][32 + 8];
    __shared__ __align__(32) float Cs[4][16][16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 2, wn = warp % 2;
    const int bm = blockIdx.y * 32, bn = blockIdx.x * 32;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < k; k0 += 16) {
        stage<16>(As, a, m, k, k, bm, k0, 32, 16);
        stage<32>(Bs, b, k, n, n, k0, bn, 16, 32);
        __syncthreads();
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, &As[wm * 16][0], 16 + 8);
        wmma::load_matrix_sync(fb, &Bs[0][wn * 16], 32 + 8);
        wmma::mma_sync(acc, fa, fb, acc);
        __syncthreads();
    }
    wmma::store_matrix_sync(&Cs[warp][0][0], acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 256; i += 32) {
        const int r = bm + wm * 16 + i / 16, col = bn + wn * 16 + i % 16;
        if (r < m && col < n) {
            c[(size_t)r * n + col] = __float2half_rn(Cs[warp][i / 16][i % 16]);
        }
    }
}
