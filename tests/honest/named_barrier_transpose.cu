// task: transpose
// covers: named_barrier, inline_ptx
// note: warp specialisation with named barriers: warps 0-3 load 32 x 32 tiles into one of two
// note: shared buffers, warps 4-7 write them out transposed. "bar.arrive 1 + b, 256" by the loaders
// note: and "bar.sync 1 + b, 256" by the writers hand buffer b over; "bar.arrive 3 + b, 256" by the
// note: writers and "bar.sync 3 + b, 256" by the loaders hand it back (only where a later tile will
// note: reuse it, so every barrier completes). Barrier 0 (__syncthreads) is never used.
// kforge: grid = [min(cdiv(cols, 32) * cdiv(rows, 32), 1056)]
// kforge: block = [256]
#define TILE 32

__device__ __forceinline__ void bar_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(count) : "memory");
}

extern "C" __global__ void __launch_bounds__(256) transpose(const float* __restrict__ x, float* __restrict__ y,
                                                            int rows, int cols)
{
    __shared__ float buf[2][TILE][TILE + 1];
    const int tiles_c = (cols + TILE - 1) / TILE, tiles_r = (rows + TILE - 1) / TILE;
    const long long tiles = (long long)tiles_c * tiles_r;
    const bool loader = threadIdx.x < 128;
    const int p = threadIdx.x % 128;
    const int c = p % TILE, r0 = p / TILE;       // 4 rows of 32 per pass, 8 passes per tile
    int it = 0;
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x, ++it) {
        const int b = it & 1;
        const int tr = (int)(t / tiles_c), tc = (int)(t % tiles_c);
        const bool reused_later = t + 2LL * gridDim.x < tiles;   // will a later tile load into b?
        if (loader) {
            if (it >= 2) {
                bar_sync(3 + b, 256);            // the writers are done with buffer b
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int r = r0 + 4 * e;
                const int gr = tr * TILE + r, gc = tc * TILE + c;
                buf[b][r][c] = (gr < rows && gc < cols) ? x[(long long)gr * cols + gc] : 0.0f;
            }
            bar_arrive(1 + b, 256);              // buffer b is full
        } else {
            bar_sync(1 + b, 256);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int r = r0 + 4 * e;         // a row of y = a column of the tile
                const int gr = tc * TILE + r, gc = tr * TILE + c;
                if (gr < cols && gc < rows) {
                    y[(long long)gr * rows + gc] = buf[b][c][r];
                }
            }
            if (reused_later) {
                bar_arrive(3 + b, 256);          // buffer b may be refilled
            }
        }
    }
}
