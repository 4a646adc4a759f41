// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [32 * WPR * RPB, 1, 1]
// kforge: tune WPR = [1, 2, 4, 8, 16, 32]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: tune ITEMS = [8, 4, 2, 1, 16]
// kforge: tune STREAM = [1, 0]
// kforge: constraint 32 * WPR * RPB <= 1024 and 32 * WPR * RPB >= 64
// kforge: constraint ITEMS * WPR * RPB <= 256 and (ITEMS < 16 or 32 * WPR * RPB <= 256)
// Bound pattern row_softmax (from rowsoftmax_online): WPR warps own a row, RPB rows per block, the
// row in registers (ITEMS groups of 4 values per thread), per-thread (max, sum of exp) pairs
// combined with the online-softmax rule across the warp (shuffles) and the row's warps (shared
// memory, fixed order); one read and one write per element.  KF_LOG: y = x - max - log(sum).
// The row is `xscale` * x (attention's 1 / sqrt(d); 1 for a plain softmax), plus bias[col] where
// KF_HAS_BIAS (an additive mask of one value per column), or a row of a bias matrix broadcast: row r
// adds the bias's row (r / bdiv) % bmod + (r / bblk) * bmod (a key-padding mask per batch over its
// heads and queries; a [B, 1, Tq, Tk] mask over the heads: bdiv 1, bmod Tq, bblk heads * Tq).
// KF_MASK_KEEP: the bias holds a keep-mask m, 1 where a key is seen, and adds
// (1 - m) * KF_MASK_FILL (BERT's (1 - mask) * -10000, as FasterTransformer's softmax reads it); 2: an
// integer or boolean mask of flags, a key seen where the flag is nonzero (KF_MASK_INVERT: zero), the
// others given KF_MASK_FILL (masked_fill(mask == 0, -inf)).  KF_CAUSAL: rows come in
// blocks of cols (attention's T x T scores), and row r sees columns 0 .. r % cols only: the others
// count as -inf (written 0, or -inf for log-softmax).
// Rows longer than the registers hold are streamed twice.  KF_XENT: a cross-entropy from logits,
// one value per row, y[r] = max + log(sum) - x[r, index[r]] (the row read once, nothing written back).
#ifndef WPR
#define WPR 1
#endif
#ifndef RPB
#define RPB 4
#endif
#ifndef ITEMS
#define ITEMS 8
#endif
#ifndef STREAM
#define STREAM 1
#endif
#ifndef KF_CAUSAL
#define KF_CAUSAL 0
#endif
#ifndef KF_MASK_KEEP
#define KF_MASK_KEEP 0
#endif
#ifndef KF_MASK_INVERT
#define KF_MASK_INVERT 0
#endif
#if KF_MASK_KEEP == 2
#define KF_BIAS(v) ((((v) != 0.0f) != (bool)KF_MASK_INVERT) ? 0.0f : (KF_MASK_FILL))
#elif KF_MASK_KEEP
#define KF_BIAS(v) ((1.0f - (v)) * (KF_MASK_FILL))
#else
#define KF_BIAS(v) (v)
#endif
#define KF_THREADS (32 * WPR * RPB)
#define TPR (32 * WPR)
#define VPT (4 * ITEMS)
#define CHUNK (TPR * VPT)
#include "kforge/online_softmax.cuh"

__device__ __forceinline__ void kf_row_softmax(const kf_x_t* __restrict__ x, const kf_index_t* __restrict__ index,
                                               const kf_bias_t* __restrict__ bias, kf_y_t* __restrict__ y,
                                               long long rows, int cols, float xscale, long long ldx,
                                               long long bdiv, long long bmod, long long bblk)
{
#if WPR > 1
    __shared__ float part_m[RPB][WPR];
    __shared__ float part_s[RPB][WPR];
#endif
    const int sub = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + sub;
    const bool valid = row < rows;
    const int ncols = valid ? cols : 0;
    const int nvalid = KF_CAUSAL ? min(ncols, (int)(row % (cols > 0 ? cols : 1)) + 1) : ncols;
    const long long off = (valid ? row : 0) * (long long)cols;
    const kf_x_t* __restrict__ xr = x + (valid ? row : 0) * ldx;      // x's rows ldx apart (>= cols: a strided view)
    kf_y_t* __restrict__ yr = y + (KF_XENT ? 0 : off);
    // the bias row of this row: (row / bdiv) % bmod of the bias's rows (one row for all: a mask per
    // column; a batch's row broadcast over its heads and queries; a position's row over the batches)
    const long long brow = valid ? row : 0;
    const kf_bias_t* __restrict__ br = bias + (KF_HAS_BIAS ? ((brow / bdiv) % bmod + (brow / bblk) * bmod) * (long long)cols : 0);
    const bool vec = (cols & 3) == 0 && (ldx & 3) == 0 && kf_aligned4(x) && (KF_XENT || kf_aligned4(y)) && kf_aligned4(bias);

    float v[VPT];
    auto load = [&](int base) {
        if (vec) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (t + i * TPR);
                float4 q = make_float4(KF_NEG_INF, KF_NEG_INF, KF_NEG_INF, KF_NEG_INF);
                if (j < ncols) {
                    q = STREAM ? kf_lds4(xr + j) : kf_ld4(xr + j);
                    const float4 b = KF_HAS_BIAS ? kf_ld4(br + j) : make_float4(0.f, 0.f, 0.f, 0.f);
                    q.x = j < nvalid ? q.x * xscale + (KF_HAS_BIAS ? KF_BIAS(b.x) : 0.0f) : KF_NEG_INF;
                    q.y = j + 1 < nvalid ? q.y * xscale + (KF_HAS_BIAS ? KF_BIAS(b.y) : 0.0f) : KF_NEG_INF;
                    q.z = j + 2 < nvalid ? q.z * xscale + (KF_HAS_BIAS ? KF_BIAS(b.z) : 0.0f) : KF_NEG_INF;
                    q.w = j + 3 < nvalid ? q.w * xscale + (KF_HAS_BIAS ? KF_BIAS(b.w) : 0.0f) : KF_NEG_INF;
                }
                v[4 * i + 0] = q.x;
                v[4 * i + 1] = q.y;
                v[4 * i + 2] = q.z;
                v[4 * i + 3] = q.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = base + t + i * TPR;
                v[i] = (j < nvalid) ? kf_ld(xr + j) * xscale + (KF_HAS_BIAS ? KF_BIAS(kf_ld(br + j)) : 0.0f) : KF_NEG_INF;
            }
        }
    };
    auto store = [&](int base) {
        if (vec) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (t + i * TPR);
                const float4 o = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
                if (j < ncols) {
                    if (STREAM) kf_sts4(yr + j, o); else kf_st4(yr + j, o);
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = base + t + i * TPR;
                if (j < ncols) kf_st(yr + j, v[i]);
            }
        }
    };
    // (m, s) of the values in v; without KF_LOG they become exp(v - m)
    auto local = [&](float& m, float& s) {
        m = KF_NEG_INF;
#pragma unroll
        for (int i = 0; i < VPT; ++i) m = fmaxf(m, v[i]);
        s = 0.0f;
        if (m != KF_NEG_INF) {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const float e = expf(v[i] - m);
#if !KF_LOG
                v[i] = e;
#endif
                s += e;
            }
        } else if (!KF_LOG) {        // every value masked (causal) or past the row: exp(-inf) = 0
#pragma unroll
            for (int i = 0; i < VPT; ++i) v[i] = 0.0f;
        }
    };
    auto row_pair = [&](float& m, float& s) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float om = __shfl_xor_sync(0xffffffffu, m, o);
            const float os = __shfl_xor_sync(0xffffffffu, s, o);
            if ((threadIdx.x & o) == 0) {
                kf_combine(m, s, om, os);
            } else {
                float mm = om, ss = os;
                kf_combine(mm, ss, m, s);
                m = mm;
                s = ss;
            }
        }
#if WPR > 1
        if ((threadIdx.x & 31) == 0) {
            part_m[sub][t >> 5] = m;
            part_s[sub][t >> 5] = s;
        }
        __syncthreads();
        m = part_m[sub][0];
        s = part_s[sub][0];
#pragma unroll
        for (int k = 1; k < WPR; ++k) kf_combine(m, s, part_m[sub][k], part_s[sub][k]);
#endif
    };

#if KF_XENT
    {
        float M = KF_NEG_INF, S = 0.0f;
        for (int base = 0; base < cols; base += CHUNK) {
            load(base);
            float m, s;
            local(m, s);
            kf_combine(M, S, m, s);
        }
        row_pair(M, S);
        if (valid && t == 0) {
            const long long c = (long long)index[row];
            kf_st(y + row, M + logf(S) - (kf_ld(xr + c) * xscale + (KF_HAS_BIAS ? KF_BIAS(kf_ld(br + c)) : 0.0f)));
        }
        return;
    }
#endif
    if (cols <= CHUNK) {
        load(0);
        float m, s;
        local(m, s);
        float M = m, S = s;
        row_pair(M, S);
#if KF_LOG
        const float shift = M + logf(S);
#pragma unroll
        for (int i = 0; i < VPT; ++i) v[i] -= shift;
#else
        const float scale = (m == KF_NEG_INF) ? 0.0f : expf(m - M) / S;
#pragma unroll
        for (int i = 0; i < VPT; ++i) v[i] *= scale;
#endif
        store(0);
    } else {
        float M = KF_NEG_INF, S = 0.0f;
        for (int base = 0; base < cols; base += CHUNK) {
            load(base);
            float m, s;
            local(m, s);
            kf_combine(M, S, m, s);
        }
        row_pair(M, S);
        const float inv = 1.0f / S, shift = M + logf(S);
        for (int base = 0; base < cols; base += CHUNK) {
            load(base);
#pragma unroll
            for (int i = 0; i < VPT; ++i) v[i] = KF_LOG ? v[i] - shift : expf(v[i] - M) * inv;
            store(base);
        }
    }
}
