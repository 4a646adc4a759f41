// kforge: grid = [@@TOKENS@@, 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [128, 64, 256, 512]
// kforge: tune VPT = [2, 1, 4]
// Bound pattern rope_tokens: rotary embeddings by position, in place, as serving code writes them
// (vLLM's rotary_embedding_kernel): a block per token reads its position once, then rotates the
// first `rot` values of each head of y (and of y1, the key, with its own head count) by the table's
// angles for that position.  KF_INTERLEAVED pairs (2i, 2i+1), else (i, i + rot/2).  KF_TABLE 0: cos
// and sin each [P, rot/2]; 1: one table [P, rot] of cos then sin (vLLM's cos_sin_cache).  A thread
// takes VPT groups of KF_G pairs (2 interleaved pairs: one 4-value vector; 4 pairs of halves: a
// 4-value vector from each half), every load before the first store; a head whose pairs do not
// split into whole groups, or unaligned buffers, take the one-pair-at-a-time path.
#ifndef BLOCK
#define BLOCK 128
#endif
#ifndef VPT
#define VPT 2
#endif
#define KF_THREADS BLOCK
#include "kforge/rotate_pair.cuh"

__device__ __forceinline__ float2 kf_rt_angle(const kf_cos_t* cosv, const kf_sin_t* sinv, long long pos, long long half,
                                              long long i)
{
#if KF_TABLE == 1
    (void)sinv;
    return make_float2(kf_ld(cosv + pos * 2 * half + i), kf_ld(cosv + pos * 2 * half + half + i));
#else
    return make_float2(kf_ld(cosv + pos * half + i), kf_ld(sinv + pos * half + i));
#endif
}

// the heads of one token of one buffer: `heads` rows of `cols` values from `row0`
template <typename T>
__device__ __forceinline__ void kf_rt_heads(T* y, const kf_cos_t* cosv, const kf_sin_t* sinv, long long pos,
                                            long long row0, long long heads, long long cols, long long rot)
{
    const long long half = rot / 2, pairs = heads * half;
    if (half % KF_G == 0 && cols % 4 == 0 && kf_aligned4(y)) {
        const long long groups = pairs / KF_G;
        for (long long g0 = threadIdx.x; g0 < groups; g0 += (long long)BLOCK * VPT) {
            float4 va[VPT];
#if !KF_INTERLEAVED
            float4 vb[VPT];
#endif
#pragma unroll
            for (int u = 0; u < VPT; ++u) {
                const long long g = g0 + (long long)u * BLOCK;
                if (g < groups) {
                    const long long p = g * KF_G, h = p / half, i = p - h * half;
                    T* row = y + (row0 + h) * cols;
#if KF_INTERLEAVED
                    va[u] = kf_ld4(row + 2 * i);
#else
                    va[u] = kf_ld4(row + i);
                    vb[u] = kf_ld4(row + i + half);
#endif
                }
            }
#pragma unroll
            for (int u = 0; u < VPT; ++u) {
                const long long g = g0 + (long long)u * BLOCK;
                if (g >= groups) continue;
                const long long p = g * KF_G, h = p / half, i = p - h * half;
                T* row = y + (row0 + h) * cols;
#if KF_INTERLEAVED
                float4 o;
                const float2 c0 = kf_rt_angle(cosv, sinv, pos, half, i), c1 = kf_rt_angle(cosv, sinv, pos, half, i + 1);
                kf_rotate_pair(va[u].x, va[u].y, c0, c0, o.x, o.y);
                kf_rotate_pair(va[u].z, va[u].w, c1, c1, o.z, o.w);
                kf_st4(row + 2 * i, o);
#else
                const float a4[4] = {va[u].x, va[u].y, va[u].z, va[u].w};
                const float b4[4] = {vb[u].x, vb[u].y, vb[u].z, vb[u].w};
                float ra[4], rb[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const float2 cs = kf_rt_angle(cosv, sinv, pos, half, i + k);
                    kf_rotate_pair(a4[k], b4[k], cs, cs, ra[k], rb[k]);
                }
                kf_st4(row + i, make_float4(ra[0], ra[1], ra[2], ra[3]));
                kf_st4(row + i + half, make_float4(rb[0], rb[1], rb[2], rb[3]));
#endif
            }
        }
    } else {
        for (long long p = threadIdx.x; p < pairs; p += BLOCK) {
            const long long h = p / half, i = p - h * half;
            T* row = y + (row0 + h) * cols;
            const long long ea = KF_INTERLEAVED ? 2 * i : i, eb = KF_INTERLEAVED ? 2 * i + 1 : i + half;
            float oa, ob;
            const float2 cs = kf_rt_angle(cosv, sinv, pos, half, i);
            kf_rotate_pair(kf_ld(row + ea), kf_ld(row + eb), cs, cs, oa, ob);
            kf_st(row + ea, oa);
            kf_st(row + eb, ob);
        }
    }
}

__device__ __forceinline__ void kf_rope_tokens(const kf_pos_t* positions, kf_y_t* y, kf_y1_t* y1, const kf_cos_t* cosv,
                                               const kf_sin_t* sinv, long long heads, long long heads1, long long cols,
                                               long long rot)
{
    const long long token = blockIdx.x;
    const long long pos = (long long)positions[token];
    kf_rt_heads(y, cosv, sinv, pos, token * heads, heads, cols, rot);
    if (y1 != nullptr) kf_rt_heads(y1, cosv, sinv, pos, token * heads1, heads1, cols, rot);
}
