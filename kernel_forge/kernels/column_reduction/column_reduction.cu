// kforge: grid = [cdiv(@@COLS@@, BX), SPLIT, @@BATCH@@]
// kforge: block = [BX, BY, 1]
// kforge: tune BX = [32, 64, 128]
// kforge: tune BY = [8, 4, 16, 32]
// kforge: tune SPLIT = [16, 8, 32, 4, 1, 64]
// kforge: constraint BX * BY <= 1024 and BX * BY >= 128
// Bound pattern column_reduction (a bias gradient): out[c] = op over the rows of x[:, c].  A block
// owns BX columns and one of SPLIT slices of the rows; BY threads per column walk the slice (the
// BX threads of a row read consecutive columns: coalesced), the BY partials are combined in
// shared memory, and each block writes one partial per column to a module-global scratch array.
// The last block of a column strip (threadfence + an atomic count, reset by that block) combines
// the SPLIT partials in slice order: deterministic, no float atomics.  Combined in kf_reduce_t: float,
// double (KF_F64: double storage) or long long (KF_I64: integers summed exactly).  When SPLIT * cols does
// not fit the scratch, slice 0 walks every row alone.  A batch of such matrices (a reduction over
// the middle axis of N x C x HW) takes the grid's z, each its own partials and counts (the binder
// moves x and y to the matrix of blockIdx.z).
#ifndef BX
#define BX 32
#endif
#ifndef BY
#define BY 8
#endif
#ifndef SPLIT
#define SPLIT 16
#endif
#define KF_THREADS (BX * BY)
#ifndef KF_MUL
#define KF_MUL 0
#endif
#define KF_MAX_PARTIALS (1 << 20)
#define KF_MAX_STRIPS (1 << 16)

__device__ kf_reduce_t kf_col_partials[KF_MAX_PARTIALS];
__device__ unsigned int kf_col_count[KF_MAX_STRIPS];

#include "kforge/reduce_op.cuh"

// KF_MUL: each value times w[row] (a transposed matrix-vector product, y = A^T w); KF_PRE: each value's
// absolute value or square first, KF_SQRT: the result's square root stored (a column's 2-norm)
__device__ __forceinline__ void kf_column_reduction(const kf_x_t* __restrict__ x, const kf_w_t* __restrict__ w,
                                                    kf_y_t* __restrict__ y, long long rows, long long cols)
{
    __shared__ kf_reduce_t red[BY][BX + 1];
    __shared__ bool last;
    const kf_reduce_t init = kf_reduce_init();
    const long long col = (long long)blockIdx.x * BX + threadIdx.x;
    const long long z = blockIdx.z;             // this block's matrix of the batch
    const bool split = (long long)gridDim.z * gridDim.y * cols <= KF_MAX_PARTIALS
                       && (long long)gridDim.z * gridDim.x <= KF_MAX_STRIPS;
    long long lo = 0, hi = rows;
    if (split) {
        const long long per = (rows + gridDim.y - 1) / gridDim.y;
        lo = min(rows, per * blockIdx.y);
        hi = min(rows, lo + per);
    } else if (blockIdx.y != 0) {
        return;
    }
    kf_reduce_t acc = init;
    if (col < cols) {
        // 4 rows a step, their loads issued before the combines (the same order as one at a time; the
        // compiler then unrolls the step, 8 or more loads in flight)
        long long r = lo + threadIdx.y;
        for (; r + 3 * BY < hi; r += 4 * BY) {
            kf_reduce_t v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                v[u] = kf_pre(kf_ld(x + (r + u * BY) * cols + col));
                if (KF_MUL) v[u] *= kf_ld(w + r + u * BY);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) acc = kf_combine_op(acc, v[u]);
        }
        for (; r < hi; r += BY) acc = kf_combine_op(acc, kf_pre(kf_ld(x + r * cols + col)) * (KF_MUL ? kf_ld(w + r) : (kf_reduce_t)1));
    }
    red[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0) {
        kf_reduce_t a = red[0][threadIdx.x];
#pragma unroll
        for (int k = 1; k < BY; ++k) a = kf_combine_op(a, red[k][threadIdx.x]);
        acc = a;
        if (!split) {
            if (col < cols) kf_put(y + col, KF_OP_MEAN ? acc / (kf_reduce_t)rows : acc);
        } else if (col < cols) {
            kf_col_partials[(z * gridDim.y + blockIdx.y) * cols + col] = acc;
        }
    }
    if (!split) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        last = atomicAdd(&kf_col_count[z * gridDim.x + blockIdx.x], 1u) == gridDim.y - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.y == 0 && col < cols) {
        // the partials 8 at a time, loads before combines (a plain loop, NVRTC unrolled 4: each 4 a
        // round trip to L2, a chain of SPLIT / 4 of them at the run's tail; SPLIT = 64 was slower than 8)
        kf_reduce_t a = init;
        unsigned s = 0;
        for (; s + 8 <= gridDim.y; s += 8) {
            kf_reduce_t v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) v[u] = *((volatile kf_reduce_t*)&kf_col_partials[(z * gridDim.y + s + u) * cols + col]);
#pragma unroll
            for (int u = 0; u < 8; ++u) a = kf_combine_op(a, v[u]);
        }
        for (; s < gridDim.y; ++s) a = kf_combine_op(a, *((volatile kf_reduce_t*)&kf_col_partials[(z * gridDim.y + s) * cols + col]));
        kf_put(y + col, KF_OP_MEAN ? a / (kf_reduce_t)rows : a);
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) kf_col_count[z * gridDim.x + blockIdx.x] = 0u;
}
