// kforge: grid = [cdiv(@@COLS@@, 32), cdiv(@@ROWS@@, 32 * TY), 1]
// kforge: block = [32, BR, 1]
// kforge: tune BR = [8, 4, 16, 32]
// kforge: tune TY = [1, 2, 4]
// Bound pattern transpose (from transpose_smem_vec): y (cols x rows) = x (rows x cols) transposed
// through a 32 x 32 shared tile padded to 33 columns (conflict-free column reads); a row of
// threads reads 32 consecutive values of x and writes 32 consecutive values of y; TY tiles down
// the rows per block.  Values are copied as stored (x and y have one storage type).
#ifndef BR
#define BR 8
#endif
#ifndef TY
#define TY 1
#endif
#define KF_THREADS (32 * BR)

__device__ __forceinline__ void kf_transpose(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                             long long rows, long long cols)
{
    __shared__ kf_x_t tile[32][33];
    const long long c0 = (long long)blockIdx.x * 32;
#pragma unroll
    for (int ty = 0; ty < TY; ++ty) {
        const long long r0 = ((long long)blockIdx.y * TY + ty) * 32;
        if (r0 >= rows) break;
#pragma unroll
        for (int i = threadIdx.y; i < 32; i += BR) {
            const long long r = r0 + i, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[i][threadIdx.x] = x[r * cols + c];
        }
        __syncthreads();
#pragma unroll
        for (int i = threadIdx.y; i < 32; i += BR) {
            const long long oc = c0 + i, orow = r0 + threadIdx.x;
            if (oc < cols && orow < rows) y[oc * rows + orow] = tile[threadIdx.x][i];
        }
        __syncthreads();
    }
}
