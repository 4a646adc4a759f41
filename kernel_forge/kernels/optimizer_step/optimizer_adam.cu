// kforge: grid = [max(1, cdiv(@@N@@, 4 * BLOCK * VPT)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune VPT = [2, 1, 4]
// kforge: tune STREAM = [1, 0]
// kforge: constraint BLOCK * VPT <= 2048
// Bound pattern optimizer_adam: one Adam / AdamW step of every parameter, in place (llm.c's adamw,
// PyTorch's Adam and AdamW):
//     g' = gs * g (+ wd * p: KF_DECAY_L2);  m = beta1 m + (1 - beta1) g';  v = beta2 v + (1 - beta2) g'^2
//     p -= lr * ((m / c1) / (sqrt(v / c2) + eps) (+ wd * p: KF_DECAY_DECOUPLED, AdamW))
// gs: a gradient scale (llm.c's grad_scale; 1 when the task has none).  KF_COPY: p is a master copy
// (fp32), and the new p is also stored into `copy`, in its storage (llm.c's bf16 params).
// Each block owns 4 * BLOCK * VPT consecutive parameters; a thread loads VPT groups of 4 (16 bytes
// for float) of each of the four streams p, g, m, v, all before any store (4 * VPT independent
// loads in flight), updates them and stores p, m and v.  Every value is read once and written
// once: evict-first loads and stores (STREAM = 1).  The last, partial tile and unaligned buffers
// take the one-value-at-a-time path.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VPT
#define VPT 2
#endif
#ifndef STREAM
#define STREAM 1
#endif
#ifndef KF_COPY
#define KF_COPY 0
#endif
#define KF_THREADS BLOCK

struct kf_adam_t {
    float lr, beta1, beta2, rc1, rc2, eps, wd, gs;     // rc1, rc2: 1 / the bias corrections; gs: the gradient's scale
};

__device__ __forceinline__ void kf_adam1(float& p, float g, float& m, float& v, const kf_adam_t& a)
{
    g *= a.gs;
    if (KF_DECAY_L2) g = fmaf(a.wd, p, g);
    m = fmaf(a.beta1, m, (1.0f - a.beta1) * g);
    v = fmaf(a.beta2, v, (1.0f - a.beta2) * g * g);
    const float u = (m * a.rc1) / (sqrtf(v * a.rc2) + a.eps);
    p -= a.lr * (KF_DECAY_DECOUPLED ? fmaf(a.wd, p, u) : u);
}

template <typename T> __device__ __forceinline__ float4 kf_opt_ld4(const T* p)
{
    return STREAM ? kf_lds4(p) : kf_ld4(p);
}

template <typename T> __device__ __forceinline__ void kf_opt_st4(T* p, float4 v)
{
    if (STREAM) kf_sts4(p, v); else kf_st4(p, v);
}

__device__ __forceinline__ void kf_optimizer_adam(kf_param_t* param, const kf_grad_t* grad, kf_m_t* m, kf_v_t* v,
                                                  kf_copy_t* copy, long long n, float lr, float beta1, float beta2,
                                                  float c1, float c2, float eps, float wd, float gs)
{
    const kf_adam_t a = {lr, beta1, beta2, 1.0f / c1, 1.0f / c2, eps, wd, gs};
    const long long tile = (long long)blockIdx.x * (4LL * BLOCK * VPT);
    const bool vec = kf_aligned4(param) && kf_aligned4(grad) && kf_aligned4(m) && kf_aligned4(v)
                     && (!KF_COPY || kf_aligned4(copy));
    if (vec && tile + 4LL * BLOCK * VPT <= n) {
        float4 pv[VPT], gv[VPT], mv[VPT], vv[VPT];
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + 4LL * (threadIdx.x + (long long)i * BLOCK);
            pv[i] = kf_opt_ld4(param + j);
            gv[i] = kf_opt_ld4(grad + j);
            mv[i] = kf_opt_ld4(m + j);
            vv[i] = kf_opt_ld4(v + j);
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + 4LL * (threadIdx.x + (long long)i * BLOCK);
            kf_adam1(pv[i].x, gv[i].x, mv[i].x, vv[i].x, a);
            kf_adam1(pv[i].y, gv[i].y, mv[i].y, vv[i].y, a);
            kf_adam1(pv[i].z, gv[i].z, mv[i].z, vv[i].z, a);
            kf_adam1(pv[i].w, gv[i].w, mv[i].w, vv[i].w, a);
            kf_opt_st4(param + j, pv[i]);
            if (KF_COPY) kf_opt_st4(copy + j, pv[i]);
            kf_opt_st4(m + j, mv[i]);
            kf_opt_st4(v + j, vv[i]);
        }
    } else {
        const long long end = min(n, tile + 4LL * BLOCK * VPT);
        for (long long j = tile + threadIdx.x; j < end; j += BLOCK) {
            float pj = kf_ld(param + j), mj = kf_ld(m + j), vj = kf_ld(v + j);
            kf_adam1(pj, kf_ld(grad + j), mj, vj, a);
            kf_st(param + j, pj);
            if (KF_COPY) kf_st(copy + j, pj);
            kf_st(m + j, mj);
            kf_st(v + j, vj);
        }
    }
}
