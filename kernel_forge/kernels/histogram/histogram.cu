// kforge: grid = [max(1, min(132 * BPS, cdiv(@@N@@, BLOCK * 4 * UNROLL))), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: shared_mem = (4 * (@@NBINS@@) * (BLOCK // 32 if WARP_COPIES else 1)) if (@@NBINS@@) * (BLOCK // 32 if WARP_COPIES else 1) <= SMEM_WORDS else 0
// kforge: tune BLOCK = [256, 128, 512]
// kforge: tune UNROLL = [2, 4, 1]
// kforge: tune BPS = [4, 2, 8]
// kforge: tune WARP_COPIES = [1, 0]
// kforge: define SMEM_WORDS = 12288
// kforge: constraint BLOCK * BPS <= 2048
// Bound pattern histogram (from histogram_warp_private): private counters in shared memory --
// one copy per warp (WARP_COPIES = 1: a warp's lanes collide only with each other) or one per
// block -- filled by a persistent grid that reads x 16 bytes at a time (UNROLL loads in flight per
// thread), then each block adds its non-empty bins to a module-global tally with one integer
// atomic each.  The last block to finish (threadfence + an atomic ticket) moves the tally into
// the output bins -- it overwrites them, so no zeroed output is needed -- and leaves the tally
// and the ticket at zero for the next launch.  Integer atomics are exact: deterministic.  When
// the copies would not fit in shared memory the launch asks for none and the loop counts straight
// into the tally.  At most KF_MAX_BINS bins.  KF_INDEX_MODULO: a value v counts in bin v mod nbins
// (as NumPy's %); KF_BIN_WIDTH > 1: a value v in [KF_BIN_LO, KF_BIN_LO + KF_BIN_SPAN) counts in bin
// (v - KF_BIN_LO) / KF_BIN_WIDTH, the others are skipped; KF_BIN_RANGE: a real value counts in one of
// nbins equal bins of [lo, hi] (1) or in bins of width `hi` from lo (2), the bin worked out in double
// (a float product could round a value across an edge) -- a value equal to the range's end in the
// last bin (KF_BIN_CLOSED) or skipped, values outside skipped or, KF_BIN_CLAMP, counted in the end
// bins, NaN skipped; else a value outside [0, nbins) is skipped.  KF_WEIGHTED: each value adds its
// weight w[i] to its bin instead of 1 (torch.bincount(x, weights=w), a segment sum by class): the
// counters, the tally and the bins are float, their float atomics add in no fixed order (the
// manifest declares the task nondeterministic).
#ifndef KF_WEIGHTED
#define KF_WEIGHTED 0
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef UNROLL
#define UNROLL 2
#endif
#ifndef BPS
#define BPS 4
#endif
#ifndef WARP_COPIES
#define WARP_COPIES 1
#endif
#ifndef SMEM_WORDS
#define SMEM_WORDS 12288
#endif
#define KF_THREADS BLOCK
#define KF_COPIES (WARP_COPIES ? (BLOCK / 32) : 1)
#define KF_MAX_BINS (1 << 16)
#define KF_PER_CHUNK (16 / (int)sizeof(kf_x_t))

__device__ kf_count_t kf_hist_tally[KF_MAX_BINS];
__device__ unsigned int kf_hist_ticket;

#if KF_BIN_RANGE
__device__ __forceinline__ double kf_real(float v) { return (double)v; }
#if KF_HALF
__device__ __forceinline__ double kf_real(__half v) { return (double)__half2float(v); }
#endif
#if KF_BF16
__device__ __forceinline__ double kf_real(__nv_bfloat16 v) { return (double)__bfloat162float(v); }
#endif

__device__ __forceinline__ long long kf_bin_of(kf_x_t value, long long nb, double lo, double hi)
{
    const double v = kf_real(value);
#if KF_BIN_RANGE == 2
    const double end = lo + (double)nb * hi;
    const double t = (v - lo) / hi;
#else
    const double end = hi;
    const double t = (v - lo) * (double)nb / (hi - lo);
#endif
    if (v != v) return -1;
    if (v == end) return KF_BIN_CLOSED || KF_BIN_CLAMP ? nb - 1 : -1;
    long long b = (long long)floor(t);
#if KF_BIN_CLAMP
    b = b < 0 ? 0 : (b >= nb ? nb - 1 : b);
#endif
    return (v >= lo && v <= end && b < nb) || KF_BIN_CLAMP ? b : -1;
}
#else
__device__ __forceinline__ long long kf_bin_of(kf_x_t value, long long nb, double, double)
{
    const long long v = (long long)value;
#if KF_INDEX_MODULO
    const long long r = v % nb;
    return r < 0 ? r + nb : r;
#elif KF_BIN_WIDTH > 1
    const long long r = v - KF_BIN_LO;
    return (r >= 0 && r < KF_BIN_SPAN) ? r / KF_BIN_WIDTH : -1;
#else
    return (v >= 0 && v < nb) ? v : -1;
#endif
}
#endif

// a block's private counters in shared memory: 32-bit counts, or a weighted histogram's float sums
#if KF_WEIGHTED
typedef float kf_sub_t;
#else
typedef unsigned int kf_sub_t;
#endif

// the weight of value i: w[i], or 1 for a count
__device__ __forceinline__ kf_sub_t kf_weight(const kf_w_t* __restrict__ w, long long i)
{
#if KF_WEIGHTED
    return kf_ld(w + i);
#else
    return 1u;
#endif
}

template <typename C>
__device__ __forceinline__ void kf_count(C* h, kf_x_t value, long long nb, double lo, double hi, kf_sub_t weight)
{
    const long long b = kf_bin_of(value, nb, lo, hi);
    if (b >= 0) atomicAdd(h + b, (C)weight);
}

__device__ __forceinline__ void kf_histogram(const kf_x_t* __restrict__ x, kf_bins_t* __restrict__ bins,
                                             long long n, long long nbins, double lo, double hi,
                                             const kf_w_t* __restrict__ w)
{
    extern __shared__ unsigned int kf_sub_words[];
    kf_sub_t* kf_sub = reinterpret_cast<kf_sub_t*>(kf_sub_words);     // 4-byte counters (or weights' sums)
    __shared__ bool kf_last;
    const long long nb = nbins < KF_MAX_BINS ? nbins : KF_MAX_BINS;
    const bool priv = nb * KF_COPIES <= SMEM_WORDS;       // the launch's shared_mem test
    if (priv) {
        for (long long i = threadIdx.x; i < nb * KF_COPIES; i += BLOCK) kf_sub[i] = (kf_sub_t)0;
        __syncthreads();
    }
    kf_sub_t* mine = kf_sub + (KF_COPIES > 1 ? (threadIdx.x >> 5) : 0) * nb;

    const long long stride = (long long)gridDim.x * BLOCK;
    const long long first = (long long)blockIdx.x * BLOCK + threadIdx.x;
    long long done = 0;                       // values counted by the 16-byte loop
    if ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0) {
        const long long nvec = n / KF_PER_CHUNK;
        const uint4* __restrict__ x16 = reinterpret_cast<const uint4*>(x);
        long long v = first;
        for (; v + (UNROLL - 1) * stride < nvec; v += UNROLL * stride) {
            uint4 q[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) q[u] = __ldcs(x16 + v + u * stride);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const kf_x_t* e = reinterpret_cast<const kf_x_t*>(&q[u]);
#pragma unroll
                for (int j = 0; j < KF_PER_CHUNK; ++j) {
                    const kf_sub_t wt = kf_weight(w, (v + u * stride) * KF_PER_CHUNK + j);
                    if (priv) kf_count(mine, e[j], nb, lo, hi, wt); else kf_count(kf_hist_tally, e[j], nb, lo, hi, wt);
                }
            }
        }
        for (; v < nvec; v += stride) {
            const uint4 q = __ldcs(x16 + v);
            const kf_x_t* e = reinterpret_cast<const kf_x_t*>(&q);
#pragma unroll
            for (int j = 0; j < KF_PER_CHUNK; ++j) {
                const kf_sub_t wt = kf_weight(w, v * KF_PER_CHUNK + j);
                if (priv) kf_count(mine, e[j], nb, lo, hi, wt); else kf_count(kf_hist_tally, e[j], nb, lo, hi, wt);
            }
        }
        done = nvec * KF_PER_CHUNK;
    }
    for (long long i = done + first; i < n; i += stride) {     // the rest (all of x when unaligned)
        const kf_sub_t wt = kf_weight(w, i);
        if (priv) kf_count(mine, x[i], nb, lo, hi, wt); else kf_count(kf_hist_tally, x[i], nb, lo, hi, wt);
    }

    if (priv) {
        __syncthreads();
        for (long long b = threadIdx.x; b < nb; b += BLOCK) {
            kf_count_t total = 0;
#pragma unroll
            for (int c = 0; c < KF_COPIES; ++c) total += kf_sub[c * nb + b];
            if (total) atomicAdd(kf_hist_tally + b, total);
        }
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) kf_last = atomicAdd(&kf_hist_ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!kf_last) return;
    __threadfence();
    for (long long b = threadIdx.x; b < nbins; b += BLOCK) {
        // every other block's atomics are done: take the bin's total and leave zero behind
#if KF_WEIGHTED
        kf_st(bins + b, b < nb ? atomicExch(kf_hist_tally + b, (kf_count_t)0) : (kf_count_t)0);
#else
        bins[b] = (kf_bins_t)(b < nb ? atomicExch(kf_hist_tally + b, (kf_count_t)0) : (kf_count_t)0);
#endif
    }
    if (threadIdx.x == 0) kf_hist_ticket = 0u;
}
