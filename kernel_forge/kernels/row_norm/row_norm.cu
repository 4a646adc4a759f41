// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [32 * WPR * RPB, 1, 1]
// kforge: tune WPR = [1, 2, 4, 8, 16, 32]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: tune ITEMS = [8, 4, 2, 1, 16]
// kforge: tune STREAM = [1, 0]
// kforge: constraint 32 * WPR * RPB <= 1024 and 32 * WPR * RPB >= 64
// kforge: constraint ITEMS * WPR * RPB <= 256 and (ITEMS < 16 or 32 * WPR * RPB <= 256)
// Bound pattern row_norm (from rownorm_layernorm): WPR warps own a row, RPB rows per block, each
// thread holds ITEMS groups of 4 values of the row in registers (all loads first); per-thread
// (count, mean, M2) triples merged with Chan's parallel update across the warp (shuffles) and
// the row's warps (shared memory, fixed order).  KF_RMS: the triples carry the sum of squares
// with a zero mean; KF_L2 (with KF_RMS): y = x / max(||x||, eps), F.normalize.  Rows longer than
// the registers hold are streamed twice.  4-wide accesses when cols % 4 == 0 and every pointer is
// aligned; one value at a time otherwise.
// KF_ADD: the row normed is x + res (a residual added first: fused_add_rms_norm), written to `sum`
// (KF_SUM) as it is loaded; KF_PRE_BIAS: a vector of one value a column added too, before the
// statistics (BERT's post-LN, LN(x + res + bias): FasterTransformer, ONNX Runtime's SkipLayerNorm) -- in place of the residual, as vLLM's kernel does: each value is read
// and written by the same thread, so x, res, sum and y may be the same buffers; a row streamed
// twice reads its second pass back from `sum`.  KF_ALIAS (two of x, res, sum and y one buffer):
// those four carry no __restrict__.  KF_W_OFFSET: 1.0f where the weight is stored as its difference
// from one (Gemma's RMSNorm multiplies by 1 + w), else 0.0f.  KF_GROUP: a group norm of N x C x inner
// (GroupNorm; InstanceNorm with one channel a group): row r is group r % groups of a sample, its
// values channel after channel, and the weight and bias are per channel -- channel
// (r % groups) * (cols / inner) + j / inner for column j (4 values a load share one when inner % 4 == 0).
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
#define KF_THREADS (32 * WPR * RPB)
#define TPR (32 * WPR)
#define VPT (4 * ITEMS)
#define CHUNK (TPR * VPT)
#ifndef KF_ADD
#define KF_ADD 0
#endif
#ifndef KF_L2
#define KF_L2 0
#endif
#ifndef KF_PRE_BIAS
#define KF_PRE_BIAS 0
#endif
#define KF_ADDS (KF_ADD || KF_PRE_BIAS)
#ifndef KF_SUM
#define KF_SUM 0
#endif
#ifndef KF_GROUP
#define KF_GROUP 0
#endif
#if KF_ALIAS
#define KF_RESTRICT_IO
#else
#define KF_RESTRICT_IO __restrict__
#endif

struct KfStats {
    float n, mean, m2;
};

__device__ __forceinline__ KfStats kf_merge(KfStats a, KfStats b)
{
    const float n = a.n + b.n;
    if (n == 0.0f) {
        return a;
    }
    const float d = b.mean - a.mean;
    const float wb = __fdividef(b.n, n);
    KfStats r;
    r.n = n;
    r.mean = fmaf(d, wb, a.mean);
    r.m2 = a.m2 + b.m2 + d * d * a.n * wb;
    return r;
}

__device__ __forceinline__ KfStats kf_warp_merge(KfStats s)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        KfStats o;
        o.n = __shfl_xor_sync(0xffffffffu, s.n, off);
        o.mean = __shfl_xor_sync(0xffffffffu, s.mean, off);
        o.m2 = __shfl_xor_sync(0xffffffffu, s.m2, off);
        s = ((threadIdx.x & off) == 0) ? kf_merge(s, o) : kf_merge(o, s);
    }
    return s;
}

__device__ __forceinline__ void kf_row_norm(const kf_x_t* KF_RESTRICT_IO x, const kf_res_t* KF_RESTRICT_IO res,
                                            kf_sum_t* KF_RESTRICT_IO sum, const kf_weight_t* __restrict__ w,
                                            const kf_bias_t* __restrict__ b, kf_y_t* KF_RESTRICT_IO y,
                                            kf_s_t* __restrict__ mean_out, kf_s_t* __restrict__ rstd_out,
                                            kf_s_t* __restrict__ var_out, long long rows, int cols, float eps,
                                            int inner, int groups, long long ldx,
                                            const kf_pre_bias_t* __restrict__ pb)
{
#if WPR > 1
    __shared__ KfStats part[RPB][WPR];
#endif
    const int sub = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const long long row = (long long)blockIdx.x * RPB + sub;
    const bool valid = row < rows;
    const int ncols = valid ? cols : 0;
    const long long off = (valid ? row : 0) * (long long)cols;
    const kf_x_t* KF_RESTRICT_IO xr = x + (valid ? row : 0) * ldx;      // x's rows ldx apart (>= cols: a strided view)
    const kf_res_t* KF_RESTRICT_IO rr = res + off;
    kf_sum_t* KF_RESTRICT_IO sr = sum + off;
    kf_y_t* KF_RESTRICT_IO yr = y + off;
    const bool vec = (cols & 3) == 0 && (ldx & 3) == 0 && kf_aligned4(x) && kf_aligned4(y) && kf_aligned4(w) && kf_aligned4(b)
                     && kf_aligned4(res) && kf_aligned4(sum) && kf_aligned4(pb) && (!KF_GROUP || (inner & 3) == 0);
    // the weight's and bias's index of column j: j itself, or (KF_GROUP) its channel
    // 32-bit arithmetic (a 64-bit remainder is a call with a stack frame): a row's values are
    // int-indexed, so inner fits, and a group norm has far fewer than 2^32 rows (samples x groups)
    const int ginner = KF_GROUP ? inner : 1;
    const long long chan0 = KF_GROUP ? (long long)(valid ? (unsigned)row % (unsigned)groups : 0u) * (cols / ginner) : 0;
#define KF_CHAN(j) (KF_GROUP ? chan0 + (j) / ginner : (long long)(j))

    float v[VPT];
    auto col_of = [&](int base, int i) -> int {
        return vec ? base + 4 * (t + (i >> 2) * TPR) + (i & 3) : base + t + i * TPR;
    };
    // again: the second pass over a row streamed twice (the sum, where one is written, is read back)
    auto load = [&](int base, bool again) {
        if (vec) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (t + i * TPR);
                float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
                if (j < ncols) {
                    if (KF_ADDS && KF_SUM && again) {
                        q = kf_ld4(sr + j);
                    } else {
                        q = STREAM ? kf_lds4(xr + j) : kf_ld4(xr + j);
                        if (KF_ADD) {
                            const float4 r = STREAM ? kf_lds4(rr + j) : kf_ld4(rr + j);
                            q.x += r.x; q.y += r.y; q.z += r.z; q.w += r.w;
                        }
                        if (KF_PRE_BIAS) {
                            const float4 c = kf_ld4(pb + j);
                            q.x += c.x; q.y += c.y; q.z += c.z; q.w += c.w;
                        }
                        if (KF_ADDS && KF_SUM && !again) kf_st4(sr + j, q);
                    }
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
                float q = 0.0f;
                if (j < ncols) {
                    if (KF_ADDS && KF_SUM && again) {
                        q = kf_ld(sr + j);
                    } else {
                        q = kf_ld(xr + j);
                        if (KF_ADD) q += kf_ld(rr + j);
                        if (KF_PRE_BIAS) q += kf_ld(pb + j);
                        if (KF_ADDS && KF_SUM && !again) kf_st(sr + j, q);
                    }
                }
                v[i] = q;
            }
        }
    };
    auto local = [&](int base) -> KfStats {
        float s = 0.0f, cnt = 0.0f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const bool in = col_of(base, i) < ncols;
            s += in ? v[i] : 0.0f;
            cnt += in ? 1.0f : 0.0f;
        }
        KfStats r;
        r.n = cnt;
#if KF_RMS
        r.mean = 0.0f;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) q += (col_of(base, i) < ncols) ? v[i] * v[i] : 0.0f;
#else
        r.mean = cnt > 0.0f ? __fdividef(s, cnt) : 0.0f;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const float d = v[i] - r.mean;
            q += (col_of(base, i) < ncols) ? d * d : 0.0f;
        }
#endif
        r.m2 = q;
        return r;
    };
    auto affine = [&](float val, int j) -> float {
#if KF_HAS_W
        val *= KF_W_OFFSET + kf_ld(w + KF_CHAN(j));
#endif
#if KF_HAS_B
        val += kf_ld(b + KF_CHAN(j));
#endif
        return val;
    };
    auto store = [&](int base, float mean, float rstd) {
        if (vec) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (t + i * TPR);
                if (j < ncols) {
                    float4 o;
                    o.x = (v[4 * i + 0] - mean) * rstd;
                    o.y = (v[4 * i + 1] - mean) * rstd;
                    o.z = (v[4 * i + 2] - mean) * rstd;
                    o.w = (v[4 * i + 3] - mean) * rstd;
#if KF_HAS_W
#if KF_GROUP
                    const float gc = kf_ld(w + KF_CHAN(j));
                    const float4 g = make_float4(gc, gc, gc, gc);
#else
                    const float4 g = kf_ld4(w + j);
#endif
                    o.x *= KF_W_OFFSET + g.x; o.y *= KF_W_OFFSET + g.y; o.z *= KF_W_OFFSET + g.z; o.w *= KF_W_OFFSET + g.w;
#endif
#if KF_HAS_B
#if KF_GROUP
                    const float hc = kf_ld(b + KF_CHAN(j));
                    const float4 h = make_float4(hc, hc, hc, hc);
#else
                    const float4 h = kf_ld4(b + j);
#endif
                    o.x += h.x; o.y += h.y; o.z += h.z; o.w += h.w;
#endif
                    if (STREAM) kf_sts4(yr + j, o); else kf_st4(yr + j, o);
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = base + t + i * TPR;
                if (j < ncols) kf_st(yr + j, affine((v[i] - mean) * rstd, j));
            }
        }
    };
    auto row_stats = [&](KfStats s) -> KfStats {
        s = kf_warp_merge(s);
#if WPR > 1
        if ((threadIdx.x & 31) == 0) part[sub][t >> 5] = s;
        __syncthreads();
        s = part[sub][0];
#pragma unroll
        for (int k = 1; k < WPR; ++k) s = kf_merge(s, part[sub][k]);
#endif
        return s;
    };
    auto finish = [=](KfStats s) -> float {
        const float var = s.m2 / (float)(cols > 0 ? cols : 1);
        const float rstd = KF_L2 ? 1.0f / fmaxf(sqrtf(s.m2), eps) : rsqrtf(var + eps);
        if (valid && t == 0) {
#if KF_MEAN
            kf_st(mean_out + row, s.mean);
#endif
#if KF_RSTD
            kf_st(rstd_out + row, rstd);
#endif
#if KF_VAR
            kf_st(var_out + row, var);
#endif
        }
        return rstd;
    };

    if (cols <= CHUNK) {
        load(0, false);
        const KfStats s = row_stats(local(0));
        store(0, s.mean, finish(s));
    } else {
        KfStats acc = {0.0f, 0.0f, 0.0f};
        for (int base = 0; base < cols; base += CHUNK) {
            load(base, false);
            acc = kf_merge(acc, local(base));
        }
        const KfStats s = row_stats(acc);
        const float rstd = finish(s);
        for (int base = 0; base < cols; base += CHUNK) {
            load(base, true);
            store(base, s.mean, rstd);
        }
    }
}
#undef KF_CHAN
