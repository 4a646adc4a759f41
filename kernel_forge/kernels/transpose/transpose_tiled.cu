// transpose: TILE x TILE shared-memory tile padded by one column (conflict-free column reads),
// block = 32 x BLOCK_ROWS threads; each thread moves (TILE / 32) * (TILE / BLOCK_ROWS) elements.
// Reads of x and writes of y are both row-contiguous within a warp (coalesced).  Edge tiles are
// bounds-checked on both sides, so any rows/cols work.  A pure copy: bit-exact.
// kforge: grid = [cdiv(cols, TILE), cdiv(rows, TILE), 1]
// kforge: block = [32, BLOCK_ROWS, 1]
// kforge: tune TILE = [32, 64]
// kforge: tune BLOCK_ROWS = [8, 4, 16, 32]
// kforge: constraint TILE % BLOCK_ROWS == 0
// kforge: constraint 32 * BLOCK_ROWS <= 1024
// kforge: constraint 4 * TILE * (TILE + 1) <= 49152

#ifndef TILE
#define TILE 32
#endif
#ifndef BLOCK_ROWS
#define BLOCK_ROWS 8
#endif

#define CX (TILE / 32)   // columns per thread

extern "C" __global__ void __launch_bounds__(32 * BLOCK_ROWS)
transpose(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];
    const int c0 = blockIdx.x * TILE;   // first column of x in this tile
    const int r0 = blockIdx.y * TILE;   // first row of x in this tile
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;

    // load: tile[r][c] = x[r0 + r, c0 + c]
#pragma unroll
    for (int i = 0; i < TILE; i += BLOCK_ROWS) {
        const int r = r0 + ty + i;
#pragma unroll
        for (int j = 0; j < CX; ++j) {
            const int c = c0 + tx + 32 * j;
            if (r < rows && c < cols) {
                tile[ty + i][tx + 32 * j] = __ldg(x + (size_t)r * cols + c);
            }
        }
    }
    __syncthreads();
    // store: y[c0 + cc, r0 + rr] = tile[rr][cc]; consecutive threads take consecutive rr
#pragma unroll
    for (int i = 0; i < TILE; i += BLOCK_ROWS) {
        const int c = c0 + ty + i;          // row of y
#pragma unroll
        for (int j = 0; j < CX; ++j) {
            const int r = r0 + tx + 32 * j; // column of y
            if (c < cols && r < rows) {
                y[(size_t)c * rows + r] = tile[tx + 32 * j][ty + i];
            }
        }
    }
}
