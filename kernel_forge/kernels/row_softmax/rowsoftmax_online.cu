// softmax_rows -- expert pattern rowsoftmax_online: one read and one write per element, one barrier.
// WPR warps own a row (WPR = 1: a warp per row, no barrier), RPB rows per block.  Each thread loads
// its ITEMS float4 of the row (all loads first; evict-first hints when STREAM), takes the maximum
// m of its own values and replaces each value v by e = exp(v - m), summing them into s.  The
// per-thread (m, s) pairs are combined with the online-softmax rule -- (m1, s1) + (m2, s2) =
// (M, s1 exp(m1 - M) + s2 exp(m2 - M)), M = max(m1, m2) -- across the warp with shuffles and across
// the row's warps through shared memory in a fixed order (deterministic).  Then each thread scales
// its e by exp(m - M) / S (one exp per thread, not per element) and writes y once.
// Rows longer than the registers hold (cols > 128 * WPR * ITEMS) take a streaming path: a running
// (m, s) per thread over the chunks, then x is read again and y = exp(x - M) / S.
// expf, not __expf: arguments reach -140 here and __expf's error grows with them.  float4
// accesses when cols % 4 == 0, the same mapping one float at a time otherwise; out-of-row slots
// hold -inf (exp gives 0).  Rows past `rows` take part in the barrier and store nothing.
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

#define TPR (32 * WPR)
#define VPT (4 * ITEMS)
#define CHUNK (TPR * VPT)
#define NEG_INF __int_as_float(0xff800000)

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

// (m, s): s * exp(-m) relative to a common scale; m = -inf is the empty set
__device__ __forceinline__ void combine(float& m, float& s, float om, float os)
{
    const float nm = fmaxf(m, om);
    const float a = (m == NEG_INF) ? 0.0f : s * expf(m - nm);
    const float b = (om == NEG_INF) ? 0.0f : os * expf(om - nm);
    m = nm;
    s = a + b;
}

extern "C" __global__ void __launch_bounds__(32 * WPR * RPB)
softmax_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
#if WPR > 1
    __shared__ float part_m[RPB][WPR];
    __shared__ float part_s[RPB][WPR];
#endif
    const int sub = threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const int row = blockIdx.x * RPB + sub;
    const bool valid = row < rows;
    const int ncols = valid ? cols : 0;
    const size_t off = (size_t)(valid ? row : 0) * (size_t)cols;
    const float* __restrict__ xr = x + off;
    float* __restrict__ yr = y + off;
    const bool vec = (cols & 3) == 0;

    float v[VPT];
    auto load = [&](int base) {
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (t + i * TPR);
                float4 q = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
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
                v[i] = (j < ncols) ? LDX(xr + j) : NEG_INF;
            }
        }
    };
    auto store = [&](int base) {
        if (vec) {
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (t + i * TPR);
                if (j < ncols) STY4(y4 + (j >> 2), make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]));
            }
        } else {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = base + t + i * TPR;
                if (j < ncols) STY(yr + j, v[i]);
            }
        }
    };
    // (m, s) of the values in v, which become exp(v - m)
    auto local = [&](float& m, float& s) {
        m = NEG_INF;
#pragma unroll
        for (int i = 0; i < VPT; ++i) m = fmaxf(m, v[i]);
        s = 0.0f;
        if (m != NEG_INF) {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                v[i] = expf(v[i] - m);        // -inf slots give 0
                s += v[i];
            }
        }
    };
    // the row's (M, S) from every thread's pair (one barrier when WPR > 1)
    auto row_pair = [&](float& m, float& s) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float om = __shfl_xor_sync(0xffffffffu, m, o);
            const float os = __shfl_xor_sync(0xffffffffu, s, o);
            if ((threadIdx.x & o) == 0) {
                combine(m, s, om, os);      // the lower lane's pair first: both lanes get the same bits
            } else {
                float mm = om, ss = os;
                combine(mm, ss, m, s);
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
        for (int w = 1; w < WPR; ++w) combine(m, s, part_m[sub][w], part_s[sub][w]);
#endif
    };

    if (cols <= CHUNK) {
        load(0);
        float m, s;
        local(m, s);
        float M = m, S = s;
        row_pair(M, S);
        const float scale = (m == NEG_INF) ? 0.0f : expf(m - M) / S;
#pragma unroll
        for (int i = 0; i < VPT; ++i) v[i] *= scale;
        store(0);
    } else {
        float M = NEG_INF, S = 0.0f;
        for (int base = 0; base < cols; base += CHUNK) {
            load(base);
            float m, s;
            local(m, s);
            combine(M, S, m, s);
        }
        row_pair(M, S);
        const float inv = 1.0f / S;
        for (int base = 0; base < cols; base += CHUNK) {
            load(base);
#pragma unroll
            for (int i = 0; i < VPT; ++i) v[i] = expf(v[i] - M) * inv;
            store(base);
        }
    }
}
