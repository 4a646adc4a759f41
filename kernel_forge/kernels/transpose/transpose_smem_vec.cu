// transpose -- expert pattern transpose_smem_vec: a 32 x 32 tile through padded shared memory,
// with 16-byte global accesses on both sides.  Block = 8 x RY threads: a thread reads 4
// consecutive columns of one tile row (one float4, 8 threads = 128 contiguous bytes of a row of x)
// and, after the barrier, writes 4 consecutive rows of one tile column as one float4 of y (8
// threads = 128 contiguous bytes of a row of y).  The tile is padded to 33 floats per row, so
// reading 4 values down a column hits 32 distinct banks across the warp.  Each thread moves
// 32 / RY float4 each way; TILES tiles along the rows of x per block amortise the index math.
// Edges: float4 loads only when cols % 4 == 0, float4 stores only when rows % 4 == 0 (row starts
// are then 16-byte aligned), everything else one float at a time with bounds checks; a pure copy,
// bit-exact.
// kforge: grid = [cdiv(cols, 32), cdiv(rows, 32 * TILES), 1]
// kforge: block = [8, RY, 1]
// kforge: tune RY = [8, 16, 32, 4]
// kforge: tune TILES = [1, 2, 4]
// kforge: constraint 8 * RY >= 32

#ifndef RY
#define RY 8
#endif
#ifndef TILES
#define TILES 1
#endif

#define T 32
#define PER (T / RY)          // rows (load) or columns (store) per thread per tile

extern "C" __global__ void __launch_bounds__(8 * RY)
transpose(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    __shared__ float tile[T][T + 1];
    const int tx = threadIdx.x;            // 0..7: which 4-wide group
    const int ty = threadIdx.y;            // 0..RY-1
    const int c0 = blockIdx.x * T;         // first column of x in the tile
    const bool vload = (cols & 3) == 0;
    const bool vstore = (rows & 3) == 0;

#pragma unroll 1
    for (int tt = 0; tt < TILES; ++tt) {
        const int r0 = (blockIdx.y * TILES + tt) * T;   // first row of x in the tile
        if (r0 >= rows) {
            break;                          // uniform across the block
        }
        // load: tile[r][4 tx + e] = x[r0 + r][c0 + 4 tx + e]
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const int r = ty + k * RY;
            const int gr = r0 + r;
            const int gc = c0 + 4 * tx;
            float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
            if (gr < rows) {
                const float* p = x + (size_t)gr * cols + gc;
                if (vload) {
                    if (gc < cols) q = __ldg(reinterpret_cast<const float4*>(p));
                } else {
                    if (gc + 0 < cols) q.x = __ldg(p + 0);
                    if (gc + 1 < cols) q.y = __ldg(p + 1);
                    if (gc + 2 < cols) q.z = __ldg(p + 2);
                    if (gc + 3 < cols) q.w = __ldg(p + 3);
                }
            }
            tile[r][4 * tx + 0] = q.x;
            tile[r][4 * tx + 1] = q.y;
            tile[r][4 * tx + 2] = q.z;
            tile[r][4 * tx + 3] = q.w;
        }
        __syncthreads();
        // store: y[c0 + c][r0 + 4 tx + e] = tile[4 tx + e][c]
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const int c = ty + k * RY;
            const int gc = c0 + c;              // row of y
            const int gr = r0 + 4 * tx;         // first column of y
            if (gc < cols) {
                const float4 q = make_float4(tile[4 * tx + 0][c], tile[4 * tx + 1][c], tile[4 * tx + 2][c],
                                             tile[4 * tx + 3][c]);
                float* p = y + (size_t)gc * rows + gr;
                if (vstore) {
                    if (gr < rows) *reinterpret_cast<float4*>(p) = q;
                } else {
                    if (gr + 0 < rows) p[0] = q.x;
                    if (gr + 1 < rows) p[1] = q.y;
                    if (gr + 2 < rows) p[2] = q.z;
                    if (gr + 3 < rows) p[3] = q.w;
                }
            }
        }
        __syncthreads();                    // the tile is reused by the next iteration
    }
}
