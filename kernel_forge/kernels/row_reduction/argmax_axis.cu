// kforge: grid = [cdiv(@@POSITIONS@@, TI), 1, 1]
// kforge: block = [TI, TY, 1]
// kforge: tune TI = [32, 64, 128]
// kforge: tune TY = [4, 8, 2, 16, 1]
// kforge: tune UNROLL = [4, 8, 2]
// kforge: constraint TI * TY <= 1024 and TI * TY >= 64
// Bound pattern row_argmax over an axis that is not the last (argmax(x, dim=1) of N x C x HW: each
// pixel's class in a segmentation map; a column argmax of a matrix when nothing is outside it):
// the index along the axis of each of the outer * inner positions' largest value (KF_ARGMIN:
// smallest), the first on ties and a NaN before any number.  TI consecutive positions per block, so
// a warp's loads of one index along the axis are consecutive addresses; TY threads share a
// position, each taking every TY-th value, UNROLL loads in flight; the TY (value, index) pairs are
// combined in shared memory -- in any order the same answer.
#ifndef TI
#define TI 32
#endif
#ifndef TY
#define TY 4
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#define KF_THREADS (TI * TY)

#include "kforge/arg_pair.cuh"

__device__ __forceinline__ void kf_axis_argmax(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                               long long outer, int axis, long long inner)
{
    __shared__ float part_v[TY][TI];
    __shared__ int part_i[TY][TI];
    const long long p = (long long)blockIdx.x * TI + threadIdx.x;
    const bool valid = p < outer * inner;
    const long long o = valid ? p / inner : 0;
    const long long in = valid ? p - o * inner : 0;
    const kf_x_t* __restrict__ xp = x + o * axis * inner + in;
    const int n = valid ? axis : 0;

    float v = __int_as_float(KF_ARGMIN ? 0x7f800000 : 0xff800000);     // nothing yet: -inf (+inf for argmin)
    int i = 0x7fffffff;
    int c = threadIdx.y;
    for (; c + (UNROLL - 1) * TY < n; c += UNROLL * TY) {
        float a[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) a[u] = kf_ld(xp + (long long)(c + u * TY) * inner);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) kf_take(v, i, a[u], c + u * TY);
    }
    for (; c < n; c += TY) kf_take(v, i, kf_ld(xp + (long long)c * inner), c);

    part_v[threadIdx.y][threadIdx.x] = v;
    part_i[threadIdx.y][threadIdx.x] = i;
    __syncthreads();
    if (threadIdx.y == 0 && valid) {
#pragma unroll
        for (int k = 1; k < TY; ++k) kf_take(v, i, part_v[k][threadIdx.x], part_i[k][threadIdx.x]);
        y[p] = (kf_y_t)(i == 0x7fffffff ? 0 : i);
    }
}
