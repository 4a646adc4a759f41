// kforge: grid = [max(1, cdiv(@@PAIRS@@, @@G@@ * BLOCK * VPT)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512]
// kforge: tune VPT = [2, 1, 4]
// kforge: tune STREAM = [1, 0]
// Bound pattern rope: rotary position embeddings.  Pair i of a row of `cols` values at position
// pos is rotated by the tables' angle: a' = a c - b s, b' = b c + a s (KF_INVERSE: by -angle).
// KF_INTERLEAVED pairs (x[2i], x[2i+1]), else (x[i], x[i + cols/2]).  KF_TABLE 0: cos and sin
// each [T, cols/2]; 1: one table of (cos, sin) pairs [T, cols/2, 2]; 2: cos and sin each [T, cols],
// one angle a value; 3: no table, the angle (pos + offset) * base^(-2i / cols) computed (sincosf).  A row's position: (row / heads) % T, or with KF_BY_SPAN (heads 1) the pair's
// index modulo span / 2 (span = T * cols: needs no cols for interleaved pairs).
// Block b owns pairs [b * KF_G * BLOCK * VPT, ...); a thread takes VPT groups of KF_G pairs (2
// interleaved pairs: one 4-value vector; 4 pairs of halves: a 4-value vector from each half), every
// load before the first store.  A row whose pairs do not split into whole groups, or unaligned
// buffers, take the one-pair-at-a-time path.  STREAM 1: x and y past the caches (the tables are
// reused by every row and stay cached).
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VPT
#define VPT 2
#endif
#ifndef STREAM
#define STREAM 1
#endif
#define KF_THREADS BLOCK
#include "kforge/rotate_pair.cuh"

struct kf_rope_dims {
    long long pairs, cols, half, span, heads, period, offset;
    float base;
};

// the table index of pair i of row `row` (the pair's global index p = row * half + i)
__device__ __forceinline__ long long kf_rope_tab(const kf_rope_dims& d, long long p, long long row, long long i)
{
#if KF_BY_SPAN
    (void)row; (void)i;
    return p % (d.span / 2);
#else
    (void)p;
    return ((row / d.heads) % d.period) * d.half + i;
#endif
}

// the angle's (cos, sin) for value `col` of the row (KF_TABLE 2) or for its pair (t: the pair's table index)
__device__ __forceinline__ float2 kf_rope_angle(const kf_cos_t* cosv, const kf_sin_t* sinv, const kf_rope_dims& d,
                                                long long t, long long row, long long col)
{
#if KF_TABLE == 0
    (void)row; (void)col; (void)d;
    return make_float2(kf_ld(cosv + t), kf_ld(sinv + t));
#elif KF_TABLE == 1
    (void)row; (void)col; (void)d; (void)sinv;
    return make_float2(kf_ld(cosv + 2 * t), kf_ld(cosv + 2 * t + 1));
#elif KF_TABLE == 2
    // the row's table row: t's row of half pairs, widened to cols values
    const long long base = (t / d.half) * d.cols;
    (void)row;
    return make_float2(kf_ld(cosv + base + col), kf_ld(sinv + base + col));
#else
    // no table: the angle computed as the reference does, (position + offset) * base^(-2i / cols)
    (void)row; (void)col; (void)cosv; (void)sinv;
    const long long pos = t / d.half, i = t - pos * d.half;
    const float inv = powf(d.base, -2.0f * (float)i / (float)d.cols);
    float sv, cv;
    sincosf((float)(pos + d.offset) * inv, &sv, &cv);
    return make_float2(cv, sv);
#endif
}

// one pair, any layout: the path for rows that do not split into whole groups
__device__ __forceinline__ void kf_rope_one(const kf_x_t* x, const kf_cos_t* cosv, const kf_sin_t* sinv, kf_y_t* y,
                                            const kf_rope_dims& d, long long p)
{
    const long long row = p / d.half, i = p - row * d.half;
    const long long ea = KF_INTERLEAVED ? 2 * p : row * d.cols + i;
    const long long eb = KF_INTERLEAVED ? ea + 1 : ea + d.half;
    const long long t = kf_rope_tab(d, p, row, i);
    const long long cola = KF_INTERLEAVED ? 2 * i : i, colb = KF_INTERLEAVED ? 2 * i + 1 : i + d.half;
    const float2 ca = kf_rope_angle(cosv, sinv, d, t, row, cola);
    const float2 cb = KF_TABLE == 2 ? kf_rope_angle(cosv, sinv, d, t, row, colb) : ca;
    float oa, ob;
    kf_rotate_pair(kf_ld(x + ea), kf_ld(x + eb), ca, cb, oa, ob);
    kf_st(y + ea, oa);
    kf_st(y + eb, ob);
}

__device__ __forceinline__ float4 kf_rope_load(const kf_x_t* p)
{
    return STREAM ? kf_lds4(p) : kf_ld4(p);
}

__device__ __forceinline__ void kf_rope_store(kf_y_t* p, float4 v)
{
    if (STREAM) kf_sts4(p, v); else kf_st4(p, v);
}

__device__ __forceinline__ void kf_rope(const kf_x_t* x, const kf_cos_t* cosv, const kf_sin_t* sinv, kf_y_t* y,
                                        long long n, long long cols, long long span, long long heads, float base = 0.0f,
                                        long long offset = 0)
{
    kf_rope_dims d;
    d.base = base;
    d.offset = offset;
    d.pairs = n / 2;
    d.cols = cols > 0 ? cols : span;              // interleaved pairs by span: any row length that divides span
    d.half = d.cols / 2;
    d.span = span > 0 ? span : d.cols;
    d.heads = heads > 0 ? heads : 1;
    d.period = d.span / d.cols;
    const long long first = (long long)blockIdx.x * (KF_G * BLOCK * VPT);
    const long long last = min(d.pairs, first + (long long)(KF_G * BLOCK * VPT));
    const bool whole = KF_BY_SPAN ? ((d.span / 2) % KF_G == 0 && (KF_INTERLEAVED || d.half % KF_G == 0))
                                  : d.half % KF_G == 0;
    if (whole && kf_aligned4(x) && kf_aligned4(y)) {
        float4 va[VPT];
#if !KF_INTERLEAVED
        float4 vb[VPT];
#endif
#pragma unroll
        for (int u = 0; u < VPT; ++u) {
            const long long p = first + KF_G * (threadIdx.x + (long long)u * BLOCK);
            if (p < last) {
#if KF_INTERLEAVED
                va[u] = kf_rope_load(x + 2 * p);
#else
                const long long row = p / d.half, i = p - row * d.half;
                va[u] = kf_rope_load(x + row * d.cols + i);
                vb[u] = kf_rope_load(x + row * d.cols + i + d.half);
#endif
            }
        }
#pragma unroll
        for (int u = 0; u < VPT; ++u) {
            const long long p = first + KF_G * (threadIdx.x + (long long)u * BLOCK);
            if (p >= last) continue;
            const long long row = p / d.half, i = p - row * d.half;
            const long long t = kf_rope_tab(d, p, row, i);
#if KF_INTERLEAVED
            const float2 c0 = kf_rope_angle(cosv, sinv, d, t, row, 2 * i);
            const float2 c1 = kf_rope_angle(cosv, sinv, d, t + 1, row, 2 * i + 2);
            const float2 c0b = KF_TABLE == 2 ? kf_rope_angle(cosv, sinv, d, t, row, 2 * i + 1) : c0;
            const float2 c1b = KF_TABLE == 2 ? kf_rope_angle(cosv, sinv, d, t + 1, row, 2 * i + 3) : c1;
            float4 o;
            kf_rotate_pair(va[u].x, va[u].y, c0, c0b, o.x, o.y);
            kf_rotate_pair(va[u].z, va[u].w, c1, c1b, o.z, o.w);
            kf_rope_store(y + 2 * p, o);
#else
            float4 oa, ob;
            const float a4[4] = {va[u].x, va[u].y, va[u].z, va[u].w};
            const float b4[4] = {vb[u].x, vb[u].y, vb[u].z, vb[u].w};
            float ra[4], rb[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float2 ca = kf_rope_angle(cosv, sinv, d, t + k, row, i + k);
                const float2 cb = KF_TABLE == 2 ? kf_rope_angle(cosv, sinv, d, t + k, row, i + k + d.half) : ca;
                kf_rotate_pair(a4[k], b4[k], ca, cb, ra[k], rb[k]);
            }
            oa = make_float4(ra[0], ra[1], ra[2], ra[3]);
            ob = make_float4(rb[0], rb[1], rb[2], rb[3]);
            kf_rope_store(y + row * d.cols + i, oa);
            kf_rope_store(y + row * d.cols + i + d.half, ob);
#endif
        }
    } else {
        for (long long p = first + threadIdx.x; p < last; p += BLOCK) kf_rope_one(x, cosv, sinv, y, d, p);
    }
}
