// kforge: grid = [cdiv(@@COLS@@, 32), cdiv(@@ROWS@@, 32 * TY), @@BATCH@@]
// kforge: block = [32, BR, 1]
// kforge: tune BR = [8, 4, 16, 32, 2]
// kforge: tune TY = [1, 2, 4]
// Bound pattern transpose (from transpose_smem_vec): y (cols x rows) = x (rows x cols) transposed
// through a 32 x 32 shared tile padded to 33 columns (conflict-free column reads); a row of
// threads reads 32 consecutive values of x and writes 32 consecutive values of y; TY tiles down
// the rows per block.  Values are copied as stored (x and y have one storage type).  The grid's z
// walks a batch of such matrices (a swap of an array's last two axes), each rows x cols, and the
// positions of a middle axis between the swapped ones: x [batch, rows, mid, cols] into y [batch, cols,
// mid, rows] (llm.c's (d1, d2, d3, d4) -> (d4, d3, d1, d2)), each position's matrix strided by mid.
#ifndef BR
#define BR 8
#endif
#ifndef TY
#define TY 1
#endif
#define KF_THREADS (32 * BR)

__device__ __forceinline__ void kf_transpose(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                             long long rows, long long cols, long long mid)
{
    __shared__ kf_x_t tile[32][33];
    const long long b = (long long)blockIdx.z / mid, m = (long long)blockIdx.z % mid;
    x += b * rows * mid * cols + m * cols;          // x's rows are mid * cols apart, y's mid * rows
    y += b * rows * mid * cols + m * rows;
    const long long ldx = mid * cols, ldy = mid * rows;
    const long long c0 = (long long)blockIdx.x * 32;
#pragma unroll
    for (int ty = 0; ty < TY; ++ty) {
        const long long r0 = ((long long)blockIdx.y * TY + ty) * 32;
        if (r0 >= rows) break;
        // a fixed count of rows per thread, so that its 32 / BR loads are all issued before the first
        // store to the tile (a loop from threadIdx.y is not unrolled: one load in flight at a time)
        kf_x_t v[32 / BR];
#pragma unroll
        for (int j = 0; j < 32 / BR; ++j) {
            const long long r = r0 + threadIdx.y + j * BR, c = c0 + threadIdx.x;
            if (r < rows && c < cols) v[j] = x[r * ldx + c];
        }
#pragma unroll
        for (int j = 0; j < 32 / BR; ++j) {
            const long long r = r0 + threadIdx.y + j * BR, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[threadIdx.y + j * BR][threadIdx.x] = v[j];
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < 32 / BR; ++j) {
            const int i = threadIdx.y + j * BR;
            const long long oc = c0 + i, orow = r0 + threadIdx.x;
            if (oc < cols && orow < rows) y[oc * ldy + orow] = tile[threadIdx.x][i];
        }
        __syncthreads();
    }
}
