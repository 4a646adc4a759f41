// layernorm: a group of GROUP threads (1 to 32 warps) per row, RPB rows per block.
// Register path (cols <= GROUP * 4 * ITEMS): the row is read once into registers; mean, then
// the biased variance as the mean of squared deviations from the registers (exact two-pass,
// no E[x^2] - mean^2 cancellation), then y = (x - mean) * rstd * gamma + beta written once.
// Wide rows (cols > GROUP * 4 * ITEMS): the same two-pass statistics over global memory
// (x is read three times).  Reductions: warp xor-shuffles, then (GROUP > 32) one shared slot per
// warp summed in a fixed order: deterministic.  float4 accesses to x, y, gamma, beta when
// cols % 4 == 0 (every row then starts 16-byte aligned), scalar coalesced accesses otherwise.
// Groups whose row is past `rows` still run (with no elements) so that every thread reaches
// the barriers; they store nothing.
// kforge: grid = [cdiv(rows, RPB), 1, 1]
// kforge: block = [GROUP * RPB, 1, 1]
// kforge: tune GROUP = [128, 32, 64, 256, 512, 1024]
// kforge: tune RPB = [1, 2, 4, 8]
// kforge: tune ITEMS = [2, 1, 4, 8]
// kforge: constraint GROUP * RPB <= 1024 and GROUP * RPB >= 64
// kforge: constraint GROUP % 32 == 0
// kforge: constraint ITEMS * GROUP * RPB <= 4096

#ifndef GROUP
#define GROUP 128
#endif
#ifndef RPB
#define RPB 1
#endif
#ifndef ITEMS
#define ITEMS 2
#endif

#define NW (GROUP / 32)
#define VPT (4 * ITEMS)
#define CHUNK (GROUP * VPT)

#if GROUP % 32
#error "GROUP must be a multiple of 32"
#endif

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, off);
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(GROUP * RPB)
layernorm(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
          float* __restrict__ y, int rows, int cols, float eps)
{
#if NW > 1
    __shared__ float red_a[RPB][NW];
    __shared__ float red_b[RPB][NW];
    const int lane = threadIdx.x & 31;
#endif
    const int grp = threadIdx.x / GROUP;
    const int gl = threadIdx.x % GROUP;
    const int row = blockIdx.x * RPB + grp;
    const bool valid = row < rows;
    const int ncols = valid ? cols : 0;
    const size_t off = (size_t)(valid ? row : 0) * (size_t)cols;
    const float* __restrict__ xr = x + off;
    float* __restrict__ yr = y + off;
    const bool vec = (cols & 3) == 0;
    const float inv_n = 1.0f / (float)(cols > 0 ? cols : 1);

    // group-wide sum; `slot` picks the shared buffer (each buffer is used once per launch)
    auto group_sum = [&](float s, int slot) -> float {
        s = warp_sum(s);
#if NW > 1
        float (*red)[NW] = slot == 0 ? red_a : red_b;
        if (lane == 0) red[grp][gl >> 5] = s;
        __syncthreads();
        s = red[grp][0];
#pragma unroll
        for (int w = 1; w < NW; ++w) s += red[grp][w];
#endif
        return s;
    };

    float v[VPT];

    // element index of value slot i (the same mapping for loads, statistics and stores)
    auto index_of = [&](int base, int i) -> int {
        return vec ? base + 4 * (gl + (i >> 2) * GROUP) + (i & 3) : base + gl + i * GROUP;
    };
    auto load_chunk = [&](int base) {
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (gl + i * GROUP);
                float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
                if (j < ncols) t = __ldg(x4 + (j >> 2));
                v[4 * i + 0] = t.x;
                v[4 * i + 1] = t.y;
                v[4 * i + 2] = t.z;
                v[4 * i + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = base + gl + i * GROUP;
                v[i] = (j < ncols) ? __ldg(xr + j) : 0.0f;
            }
        }
    };
    // y for the values in v (already loaded for chunk `base`)
    auto store_chunk = [&](int base, float mean, float rstd) {
        if (vec) {
            const float4* g4 = reinterpret_cast<const float4*>(gamma);
            const float4* b4 = reinterpret_cast<const float4*>(beta);
            float4* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) {
                const int j = base + 4 * (gl + i * GROUP);
                if (j < ncols) {
                    const float4 g = __ldg(g4 + (j >> 2));
                    const float4 bb = __ldg(b4 + (j >> 2));
                    float4 o;
                    o.x = (v[4 * i + 0] - mean) * rstd * g.x + bb.x;
                    o.y = (v[4 * i + 1] - mean) * rstd * g.y + bb.y;
                    o.z = (v[4 * i + 2] - mean) * rstd * g.z + bb.z;
                    o.w = (v[4 * i + 3] - mean) * rstd * g.w + bb.w;
                    y4[j >> 2] = o;
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const int j = base + gl + i * GROUP;
                if (j < ncols) {
                    yr[j] = (v[i] - mean) * rstd * __ldg(gamma + j) + __ldg(beta + j);
                }
            }
        }
    };

    if (cols <= CHUNK) {
        // ---- register path ----
        load_chunk(0);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            s += v[i];                  // slots outside the row hold 0
        }
        const float mean = group_sum(s, 0) * inv_n;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const float d = v[i] - mean;
            q += (index_of(0, i) < ncols) ? d * d : 0.0f;
        }
        const float var = group_sum(q, 1) * inv_n;
        const float rstd = rsqrtf(var + eps);
        store_chunk(0, mean, rstd);
    } else {
        // ---- wide rows: two-pass statistics over global memory, then a third pass ----
        float s = 0.0f;
        for (int base = 0; base < cols; base += CHUNK) {
            load_chunk(base);
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                s += v[i];
            }
        }
        const float mean = group_sum(s, 0) * inv_n;
        float q = 0.0f;
        for (int base = 0; base < cols; base += CHUNK) {
            load_chunk(base);
#pragma unroll
            for (int i = 0; i < VPT; ++i) {
                const float d = v[i] - mean;
                q += (index_of(base, i) < ncols) ? d * d : 0.0f;
            }
        }
        const float var = group_sum(q, 1) * inv_n;
        const float rstd = rsqrtf(var + eps);
        for (int base = 0; base < cols; base += CHUNK) {
            load_chunk(base);
            store_chunk(base, mean, rstd);
        }
    }
}
