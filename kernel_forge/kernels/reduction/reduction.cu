// kforge: grid = [max(1, min(132 * BPS, cdiv(@@N@@, 4 * BLOCK * ACC))), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 512, 1024, 128]
// kforge: tune ACC = [4, 2, 8]
// kforge: tune BPS = [4, 2, 8]
// kforge: constraint BLOCK * BPS <= 2048
// Bound pattern reduction (from reduce_lastblock): a persistent grid; each thread folds 4 values
// per access into ACC independent accumulators, the block combines them (warp shuffles, then the
// warps), writes one partial to a module-global array, and the last block to finish (threadfence
// + an atomic ticket, reset by that block) combines the partials in block order and writes y[0]:
// deterministic, no float atomics.  KF_MUL: the values summed are x * w (a dot product), or
// x - w under KF_DIFF (a sum of squared differences).  KF_F64: double storage, accumulated in double.
// KF_PRED (with KF_I64): the count of the values that pass a comparison (x read through kf_pred_x).
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ACC
#define ACC 4
#endif
#ifndef BPS
#define BPS 4
#endif
#define KF_THREADS BLOCK
#ifndef KF_MUL
#define KF_MUL 0
#endif
#define KF_MAX_BLOCKS 4096

__device__ kf_reduce_t kf_red_partials[KF_MAX_BLOCKS];
__device__ unsigned int kf_red_ticket;

#include "kforge/reduce_op.cuh"

__device__ __forceinline__ kf_reduce_t kf_block_combine(kf_reduce_t v, kf_reduce_t* red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = kf_combine_op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    kf_reduce_t r = red[0];
#pragma unroll
    for (int k = 1; k < BLOCK / 32; ++k) r = kf_combine_op(r, red[k]);
    __syncthreads();
    return r;
}

#ifndef KF_X_ARG
#define KF_X_ARG const kf_x_t* __restrict__
#define KF_W_ARG const kf_w_t* __restrict__
#endif
__device__ __forceinline__ void kf_reduction(KF_X_ARG x, KF_W_ARG w,
                                             kf_y_t* __restrict__ y, long long n)
{
    __shared__ kf_reduce_t red[BLOCK / 32];
    __shared__ bool last;
    const kf_reduce_t init = kf_reduce_init();
    kf_reduce_t acc[ACC];
#pragma unroll
    for (int k = 0; k < ACC; ++k) acc[k] = init;
    const long long stride = 4LL * BLOCK * ACC * gridDim.x;
    long long done = 0;
    if (kf_aligned4(x) && kf_aligned4(w)) {
        const long long full = n / 4 * 4;
        for (long long base = 4LL * ((long long)blockIdx.x * BLOCK * ACC + threadIdx.x); base < full; base += stride) {
#pragma unroll
            for (int k = 0; k < ACC; ++k) {
                const long long j = base + 4LL * k * BLOCK;
                if (j < full) {
                    auto q = kf_lds4(x + j);
                    if (KF_MUL) {
                        q = kf_pair4(q, kf_lds4(w + j));
                    }
                    q.x = kf_pre(q.x); q.y = kf_pre(q.y); q.z = kf_pre(q.z); q.w = kf_pre(q.w);
                    acc[k] = kf_combine_op(acc[k], kf_combine_op(kf_combine_op(q.x, q.y), kf_combine_op(q.z, q.w)));
                }
            }
        }
        done = full;
    }
    for (long long j = done + (long long)blockIdx.x * BLOCK + threadIdx.x; j < n; j += (long long)BLOCK * gridDim.x) {
        acc[0] = kf_combine_op(acc[0], kf_pre(KF_MUL ? kf_pair(kf_ld(x + j), kf_ld(w + j)) : kf_ld(x + j)));
    }
    kf_reduce_t v = acc[0];
#pragma unroll
    for (int k = 1; k < ACC; ++k) v = kf_combine_op(v, acc[k]);
    v = kf_block_combine(v, red);
    if (gridDim.x > KF_MAX_BLOCKS) return;          // the launch caps the grid far below this
    if (threadIdx.x == 0) {
        kf_red_partials[blockIdx.x] = v;
        __threadfence();
        last = atomicAdd(&kf_red_ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    kf_reduce_t p = init;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += BLOCK) p = kf_combine_op(p, *((volatile kf_reduce_t*)&kf_red_partials[b]));
    p = kf_block_combine(p, red);
    if (threadIdx.x == 0) {
        kf_put(y, KF_OP_MEAN ? p / (kf_reduce_t)(n > 0 ? n : 1) : p);
        kf_red_ticket = 0u;
    }
}
