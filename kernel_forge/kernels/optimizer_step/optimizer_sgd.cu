// kforge: grid = [max(1, cdiv(@@N@@, 4 * BLOCK * VPT)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune VPT = [2, 1, 4]
// kforge: tune STREAM = [1, 0]
// kforge: constraint BLOCK * VPT <= 2048
// Bound pattern optimizer_sgd: one step of SGD with momentum of every parameter, in place
// (PyTorch's SGD):
//     g' = g (+ wd * p: KF_DECAY_L2);  buf = momentum buf + (1 - dampening) g'
//     p -= lr * buf            (KF_NESTEROV: p -= lr * (g' + momentum buf))
// Each block owns 4 * BLOCK * VPT consecutive parameters; a thread loads VPT groups of 4 (16 bytes
// for float) of each of the three streams p, g, buf, all before any store, updates them and
// stores p and buf.  Every value is read once and written once: evict-first loads and stores
// (STREAM = 1).  The last, partial tile and unaligned buffers take the one-value-at-a-time path.
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

struct kf_sgd_t {
    float lr, momentum, damp1, wd;       // damp1: 1 - dampening
};

__device__ __forceinline__ void kf_sgd1(float& p, float g, float& b, const kf_sgd_t& a)
{
    if (KF_DECAY_L2) g = fmaf(a.wd, p, g);
    b = fmaf(a.momentum, b, a.damp1 * g);
    p -= a.lr * (KF_NESTEROV ? fmaf(a.momentum, b, g) : b);
}

template <typename T> __device__ __forceinline__ float4 kf_opt_ld4(const T* p)
{
    return STREAM ? kf_lds4(p) : kf_ld4(p);
}

template <typename T> __device__ __forceinline__ void kf_opt_st4(T* p, float4 v)
{
    if (STREAM) kf_sts4(p, v); else kf_st4(p, v);
}

__device__ __forceinline__ void kf_optimizer_sgd(kf_param_t* param, const kf_grad_t* grad, kf_buf_t* buf,
                                                 long long n, float lr, float momentum, float dampening, float wd)
{
    const kf_sgd_t a = {lr, momentum, 1.0f - dampening, wd};
    const long long tile = (long long)blockIdx.x * (4LL * BLOCK * VPT);
    const bool vec = kf_aligned4(param) && kf_aligned4(grad) && kf_aligned4(buf);
    if (vec && tile + 4LL * BLOCK * VPT <= n) {
        float4 pv[VPT], gv[VPT], bv[VPT];
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + 4LL * (threadIdx.x + (long long)i * BLOCK);
            pv[i] = kf_opt_ld4(param + j);
            gv[i] = kf_opt_ld4(grad + j);
            bv[i] = kf_opt_ld4(buf + j);
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + 4LL * (threadIdx.x + (long long)i * BLOCK);
            kf_sgd1(pv[i].x, gv[i].x, bv[i].x, a);
            kf_sgd1(pv[i].y, gv[i].y, bv[i].y, a);
            kf_sgd1(pv[i].z, gv[i].z, bv[i].z, a);
            kf_sgd1(pv[i].w, gv[i].w, bv[i].w, a);
            kf_opt_st4(param + j, pv[i]);
            kf_opt_st4(buf + j, bv[i]);
        }
    } else {
        const long long end = min(n, tile + 4LL * BLOCK * VPT);
        for (long long j = tile + threadIdx.x; j < end; j += BLOCK) {
            float pj = kf_ld(param + j), bj = kf_ld(buf + j);
            kf_sgd1(pj, kf_ld(grad + j), bj, a);
            kf_st(param + j, pj);
            kf_st(buf + j, bj);
        }
    }
}
