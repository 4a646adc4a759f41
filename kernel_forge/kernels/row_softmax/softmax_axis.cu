// kforge: grid = [cdiv(@@POSITIONS@@, TI), 1, 1]
// kforge: block = [TI, TY, 1]
// kforge: tune TI = [32, 64, 128]
// kforge: tune TY = [8, 4, 16, 32, 2, 1]
// kforge: tune UNROLL = [4, 8, 2]
// kforge: constraint TI * TY <= 1024 and TI * TY >= 64
// Bound pattern row_softmax over an axis that is not the last (softmax(x, dim=1) of N x C x HW: a
// segmentation map's classes; a column softmax of a matrix when nothing is outside it).  Each of
// the outer * inner positions is one softmax of `axis` values `inner` apart: TI consecutive
// positions per block, so a warp's loads of one class are consecutive addresses, and TY threads
// share a position's values, each keeping a (max, sum of exp) pair with the online-softmax rule
// over every TY-th value, UNROLL loads in flight.  The TY pairs are combined in shared memory in a
// fixed order (deterministic), then each thread reads its values again -- the block's slab was
// just read, so the second read comes from L2 -- and writes exp(v - max) / sum, or with KF_LOG
// v - max - log(sum).  The values are `xscale` * x.
#ifndef TI
#define TI 32
#endif
#ifndef TY
#define TY 8
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#define KF_THREADS (TI * TY)
#include "kforge/online_softmax.cuh"

__device__ __forceinline__ void kf_axis_softmax(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                                long long outer, long long axis, long long inner, float xscale)
{
    __shared__ float part_m[TY][TI];
    __shared__ float part_s[TY][TI];
    const long long p = (long long)blockIdx.x * TI + threadIdx.x;
    const bool valid = p < outer * inner;
    const long long o = valid ? p / inner : 0;
    const long long base = o * axis * inner + (valid ? p - o * inner : 0);
    const kf_x_t* __restrict__ xp = x + base;
    kf_y_t* __restrict__ yp = y + base;
    const long long n = valid ? axis : 0;

    float m = KF_NEG_INF, s = 0.0f;
    long long c = threadIdx.y;
    for (; c + (UNROLL - 1) * TY < n; c += UNROLL * TY) {
        float v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = kf_ld(xp + (c + u * TY) * inner) * xscale;
        float mu = v[0];
#pragma unroll
        for (int u = 1; u < UNROLL; ++u) mu = fmaxf(mu, v[u]);
        float su = 0.0f;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) su += expf(v[u] - mu);
        kf_combine(m, s, mu, su);
    }
    for (; c < n; c += TY) kf_combine(m, s, kf_ld(xp + c * inner) * xscale, 1.0f);

    part_m[threadIdx.y][threadIdx.x] = m;
    part_s[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    m = part_m[0][threadIdx.x];
    s = part_s[0][threadIdx.x];
#pragma unroll
    for (int k = 1; k < TY; ++k) kf_combine(m, s, part_m[k][threadIdx.x], part_s[k][threadIdx.x]);
#if KF_LOG
    const float shift = m + logf(s);
#define KF_OUT(v) ((v) - shift)
#else
    const float inv = 1.0f / s;
#define KF_OUT(v) (expf((v) - m) * inv)
#endif
    c = threadIdx.y;
    for (; c + (UNROLL - 1) * TY < n; c += UNROLL * TY) {
        float v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = kf_ld(xp + (c + u * TY) * inner) * xscale;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) kf_st(yp + (c + u * TY) * inner, KF_OUT(v[u]));
    }
    for (; c < n; c += TY) kf_st(yp + c * inner, KF_OUT(kf_ld(xp + c * inner) * xscale));
#undef KF_OUT
}
