// kforge: grid = [max(1, cdiv(@@N@@, 4 * BLOCK * VPT)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune VPT = [4, 2, 1, 8]
// kforge: tune STREAM = [1, 2, 0]
// kforge: constraint BLOCK * VPT <= 4096
// Bound pattern elementwise (from elementwise_vec): each block owns 4 * BLOCK * VPT consecutive
// elements; a thread loads VPT groups of 4 (16 bytes for float) of every full-size operand, all
// before any store, then applies kf_op and stores; a bias of `cols` values is broadcast along
// the rows (its 4 values read together when cols % 4 == 0).  KF_CHANNEL: per-channel vectors of
// `cols` values broadcast along a middle axis instead (NCHW: element j in channel (j / inner) %
// cols), a bias or, KF_BN, a batch norm's (x - mean) / sqrt(var + eps) * scale + offset; 4 values
// share their channel when inner % 4 == 0.  The last, partial tile and unaligned buffers take the
// one-value-at-a-time path.  No __restrict__: y may be an input too.
// STREAM: 1 loads and stores past the caches (evict-first), 2 streams the loads only (y stays in
// L2 for whoever reads it next, as llm.c's residual and GELU kernels do: its residual ran 7 % faster
// than this pattern's best of 1 and 0 on the H100), 0 neither.  KF_HAS_Y2: a second output of the same
// operands, kf_op2, stored beside the first (sin and cos of x; a fused bias and activation that keeps
// the pre-activation too).  KF_HAS_CSCALE: x times a vector of `cols` values broadcast along the rows
// (cscale[j % cols], as the bias is) before kf_op.
#ifndef KF_HAS_CSCALE
#define KF_HAS_CSCALE 0
#endif
#ifndef KF_HAS_Y2
#define KF_HAS_Y2 0
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VPT
#define VPT 4
#endif
#ifndef STREAM
#define STREAM 1
#endif
#define KF_THREADS BLOCK

@@OP@@

// the per-channel vectors of KF_CHANNEL (a batch norm's four, else the bias) and where channels lie
struct kf_chan {
    const kf_mean_t* mean;
    const kf_var_t* var;
    const kf_scale_t* scale;
    const kf_offset_t* offset;
    float eps;
    long long inner;
};

// x of channel c before the activation (KF_CHANNEL)
__device__ __forceinline__ float kf_chan_pre(float xv, const kf_bias_t* bias, const kf_chan& ch, long long c)
{
#if KF_BN
    return (xv - kf_ld(ch.mean + c)) * (rsqrtf(kf_ld(ch.var + c) + ch.eps) * kf_ld(ch.scale + c)) + kf_ld(ch.offset + c);
#else
    return xv + kf_ld(bias + c);
#endif
}

__device__ __forceinline__ void kf_elementwise(const kf_x_t* x, const kf_z_t* z, const kf_bias_t* bias,
                                               const kf_res_t* res, kf_y_t* y, long long n, long long cols,
                                               float alpha, float beta, kf_chan ch, kf_y2_t* y2,
                                               const kf_cscale_t* cscale)
{
    const long long tile = (long long)blockIdx.x * (4LL * BLOCK * VPT);
    const bool vec = kf_aligned4(x) && kf_aligned4(z) && kf_aligned4(bias) && kf_aligned4(res) && kf_aligned4(y)
                     && kf_aligned4(y2) && kf_aligned4(cscale)
                     && ((!KF_HAS_BIAS && !KF_HAS_CSCALE) || cols % 4 == 0) && (!KF_CHANNEL || ch.inner % 4 == 0);
    if (vec && tile + 4LL * BLOCK * VPT <= n) {
        float4 xv[VPT], zv[VPT], bv[VPT], rv[VPT];
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + 4LL * (threadIdx.x + (long long)i * BLOCK);
            xv[i] = STREAM ? kf_lds4(x + j) : kf_ld4(x + j);
            zv[i] = KF_HAS_Z ? (STREAM ? kf_lds4(z + j) : kf_ld4(z + j)) : make_float4(0.f, 0.f, 0.f, 0.f);
            rv[i] = KF_HAS_RES ? (STREAM ? kf_lds4(res + j) : kf_ld4(res + j)) : make_float4(0.f, 0.f, 0.f, 0.f);
            bv[i] = KF_HAS_BIAS ? kf_ld4(bias + j % cols) : make_float4(0.f, 0.f, 0.f, 0.f);
            if (KF_HAS_CSCALE) {
                const float4 sv = kf_ld4(cscale + j % cols);
                xv[i].x *= sv.x; xv[i].y *= sv.y; xv[i].z *= sv.z; xv[i].w *= sv.w;
            }
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + 4LL * (threadIdx.x + (long long)i * BLOCK);
            if (KF_CHANNEL) {                  // the 4 values share their channel
                const long long c = (j / ch.inner) % cols;
                xv[i] = make_float4(kf_chan_pre(xv[i].x, bias, ch, c), kf_chan_pre(xv[i].y, bias, ch, c),
                                    kf_chan_pre(xv[i].z, bias, ch, c), kf_chan_pre(xv[i].w, bias, ch, c));
            }
            float4 o;
            o.x = kf_op(xv[i].x, zv[i].x, bv[i].x, rv[i].x, alpha, beta);
            o.y = kf_op(xv[i].y, zv[i].y, bv[i].y, rv[i].y, alpha, beta);
            o.z = kf_op(xv[i].z, zv[i].z, bv[i].z, rv[i].z, alpha, beta);
            o.w = kf_op(xv[i].w, zv[i].w, bv[i].w, rv[i].w, alpha, beta);
            if (STREAM == 1) kf_sts4(y + j, o); else kf_st4(y + j, o);
#if KF_HAS_Y2
            float4 o2;
            o2.x = kf_op2(xv[i].x, zv[i].x, bv[i].x, rv[i].x, alpha, beta);
            o2.y = kf_op2(xv[i].y, zv[i].y, bv[i].y, rv[i].y, alpha, beta);
            o2.z = kf_op2(xv[i].z, zv[i].z, bv[i].z, rv[i].z, alpha, beta);
            o2.w = kf_op2(xv[i].w, zv[i].w, bv[i].w, rv[i].w, alpha, beta);
            if (STREAM == 1) kf_sts4(y2 + j, o2); else kf_st4(y2 + j, o2);
#endif
        }
    } else {
        const long long end = min(n, tile + 4LL * BLOCK * VPT);
        for (long long j = tile + threadIdx.x; j < end; j += BLOCK) {
            const float xv = KF_CHANNEL ? kf_chan_pre(kf_ld(x + j), bias, ch, (j / ch.inner) % cols)
                                        : kf_ld(x + j) * (KF_HAS_CSCALE ? kf_ld(cscale + j % cols) : 1.0f);
            const float zv = KF_HAS_Z ? kf_ld(z + j) : 0.0f;
            const float rv = KF_HAS_RES ? kf_ld(res + j) : 0.0f;
            const float bv = KF_HAS_BIAS ? kf_ld(bias + j % cols) : 0.0f;
            kf_st(y + j, kf_op(xv, zv, bv, rv, alpha, beta));
#if KF_HAS_Y2
            kf_st(y2 + j, kf_op2(xv, zv, bv, rv, alpha, beta));
#endif
        }
    }
}
