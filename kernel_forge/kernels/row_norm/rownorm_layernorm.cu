// layernorm -- expert pattern rownorm_layernorm: one pass over memory, statistics in registers,
// one barrier.  WPR warps own a row (WPR = 1: a warp per row, no barrier at all; WPR > 1: one
// block-wide merge), RPB rows per block.  Each thread loads its ITEMS float4 of the row (all loads
// issued before any math; x read once with evict-first hints when STREAM), computes the mean and
// the sum of squared deviations of its own values exactly (two passes over registers), and the
// per-thread (count, mean, M2) triples are merged with Chan's parallel Welford update -- first
// across the warp with shuffles, then across the row's warps through shared memory, in a fixed
// order: deterministic, and no E[x^2] - mean^2 cancellation.  y = (x - mean) * rstd * gamma + beta
// is written once from the registers (gamma and beta are small and stay in L1/L2).
// Rows longer than the registers hold (cols > 128 * WPR * ITEMS) take a streaming path: the
// triples are merged chunk by chunk, then x is read again to write y.  float4 accesses when
// cols % 4 == 0 (every row then starts 16-byte aligned), the same mapping one float at a time
// otherwise.  Rows past `rows` still take part in the barrier and store nothing.
// kforge: grid = [cdiv(rows, RPB), 1, 1]
// kforge: block = [32 * WPR * RPB, 1, 1]
// kforge: tune WPR = [1, 2, 4, 8, 16, 32]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: tune ITEMS = [8, 4, 2, 1, 16]
// kforge: tune STREAM = [1, 0]
// kforge: constraint 32 * WPR * RPB <= 1024 and 32 * WPR * RPB >= 64
// kforge: constraint ITEMS * WPR * RPB <= 256 and (ITEMS < 16 or 32 * WPR * RPB <= 256)

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

#define TPR (32 * WPR)              // threads per row
#define VPT (4 * ITEMS)             // values per thread per chunk
#define CHUNK (TPR * VPT)           // row elements per chunk

#if STREAM
#define LDX4(p) __ldcs(p)
#define LDX(p) __ldcs(p)
#define STY4(p, v) __stcs(p, v)
#define STY(p, v) __stcs(p, v)
#else
#define LDX4(p) __ldg(p)
#define LDX(p) __ldg(p)
#define STY4(p, v) (*(p) = (v))
#define STY(p, v) (*(p) = (v))
#endif

struct Stats {
    float n, mean, m2;
};

// Chan et al.: the (count, mean, M2) of the union of two disjoint sets
__device__ __forceinline__ Stats merge(Stats a, Stats b)
{
    const float n = a.n + b.n;
    if (n == 0.0f) {
        return a;
    }
    const float d = b.mean - a.mean;
    const float wb = __fdividef(b.n, n);   // counts are small integers: 2 ulp here are far below the tolerance
    Stats r;
    r.n = n;
    r.mean = fmaf(d, wb, a.mean);
    r.m2 = a.m2 + b.m2 + d * d * a.n * wb;
    return r;
}

__device__ __forceinline__ Stats warp_merge(Stats s)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        Stats o;
        o.n = __shfl_xor_sync(0xffffffffu, s.n, off);
        o.mean = __shfl_xor_sync(0xffffffffu, s.mean, off);
        o.m2 = __shfl_xor_sync(0xffffffffu, s.m2, off);
        // the lower lane's set first, so both lanes compute the same bits
        s = ((threadIdx.x & off) == 0) ? merge(s, o) : merge(o, s);
    }
    return s;
}

extern "C" __global__ void __launch_bounds__(32 * WPR * RPB)
layernorm(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
          float* __restrict__ y, int rows, int cols, float eps)
{
#if WPR > 1
    __shared__ Stats part[RPB][WPR];
#endif
    const int sub = threadIdx.x / TPR;          // row within the block
    const int t = threadIdx.x % TPR;            // thread within the row
    const int row = blockIdx.x * RPB + sub;
    const bool valid = row < rows;
    const int ncols = valid ? cols : 0;
    const size_t off = (size_t)(valid ? row : 0) * (size_t)cols;
    const float* __restrict__ xr = x + off;
    float* __restrict__ yr = y + off;
    const bool vec = (cols & 3) == 0;

    float v[VPT];
    // element index of value slot i in the chunk starting at `base` (loads, statistics and stores agree)
    auto col_of = [&](int base, int i) -> int {
        return vec ? base + 4 * (t + (i >> 2) * TPR) + (i & 3) : base + t + i * TPR;
    };
    auto load = [&](int base) {
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (t + i * TPR);
                float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
                if (j < ncols) q = LDX4(x4 + (j >> 2));
                v[4 * i + 0] = q.x;
                v[4 * i + 1] = q.y;
                v[4 * i + 2] = q.z;
                v[4 * i + 3] = q.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = base + t + i * TPR;
                v[i] = (j < ncols) ? LDX(xr + j) : 0.0f;
            }
        }
    };
    // this thread's (count, mean, M2) over the values of the chunk at `base`, exactly
    auto local = [&](int base) -> Stats {
        float s = 0.0f, cnt = 0.0f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const bool in = col_of(base, i) < ncols;
            s += in ? v[i] : 0.0f;
            cnt += in ? 1.0f : 0.0f;
        }
        Stats r;
        r.n = cnt;
        r.mean = cnt > 0.0f ? __fdividef(s, cnt) : 0.0f;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const float d = v[i] - r.mean;
            q += (col_of(base, i) < ncols) ? d * d : 0.0f;
        }
        r.m2 = q;
        return r;
    };
    auto store = [&](int base, float mean, float rstd) {
        if (vec) {
            const float4* g4 = reinterpret_cast<const float4*>(gamma);
            const float4* b4 = reinterpret_cast<const float4*>(beta);
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (t + i * TPR);
                if (j < ncols) {
                    const float4 g = __ldg(g4 + (j >> 2));
                    const float4 b = __ldg(b4 + (j >> 2));
                    float4 o;
                    o.x = fmaf((v[4 * i + 0] - mean) * rstd, g.x, b.x);
                    o.y = fmaf((v[4 * i + 1] - mean) * rstd, g.y, b.y);
                    o.z = fmaf((v[4 * i + 2] - mean) * rstd, g.z, b.z);
                    o.w = fmaf((v[4 * i + 3] - mean) * rstd, g.w, b.w);
                    STY4(y4 + (j >> 2), o);
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = base + t + i * TPR;
                if (j < ncols) {
                    STY(yr + j, fmaf((v[i] - mean) * rstd, __ldg(gamma + j), __ldg(beta + j)));
                }
            }
        }
    };
    // the row's statistics from every thread's triple (one barrier when WPR > 1)
    auto row_stats = [&](Stats s) -> Stats {
        s = warp_merge(s);
#if WPR > 1
        if ((threadIdx.x & 31) == 0) part[sub][t >> 5] = s;
        __syncthreads();
        s = part[sub][0];
#pragma unroll
        for (int w = 1; w < WPR; ++w) s = merge(s, part[sub][w]);
#endif
        return s;
    };

    const float n = (float)(cols > 0 ? cols : 1);
    if (cols <= CHUNK) {
        load(0);
        const Stats s = row_stats(local(0));
        const float rstd = rsqrtf(s.m2 / n + eps);
        store(0, s.mean, rstd);
    } else {
        // streaming: merge the chunks' triples, then read x again to write y
        Stats acc = {0.0f, 0.0f, 0.0f};
        for (int base = 0; base < cols; base += CHUNK) {
            load(base);
            acc = merge(acc, local(base));
        }
        const Stats s = row_stats(acc);
        const float rstd = rsqrtf(s.m2 / n + eps);
        for (int base = 0; base < cols; base += CHUNK) {
            load(base);
            store(base, s.mean, rstd);
        }
    }
}
