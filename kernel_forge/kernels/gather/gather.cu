// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [TPR * RPB, 1, 1]
// kforge: tune TPR = [64, 32, 128, 256]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: constraint TPR * RPB <= 1024 and TPR * RPB >= 64
// Bound pattern gather: TPR threads copy one output row, table[index[row]], RPB rows per block;
// 4 values per access (16 bytes for float) when cols % 4 == 0 and the buffers are aligned, the
// output written with evict-first stores.  An index outside the table writes nothing.  KF_HAS_POS:
// a row of a second table by position is added (row mod period: a position embedding, as
// llm.c's encoder adds wpe[t] to wte[token]).  KF_SCATTER: the other way round, row `row` of the
// source (`table`) is copied to row index[row] of y (index_copy_, a KV cache's append by slot); a
// negative index (a padding token) writes nothing.  KF_SCATTER_ADD: added instead, by atomics
// (index_add_, an embedding's gradient, a GNN's scatter-sum), so the order of the sums is not fixed;
// with KF_HAS_POS each source row is also added into row `row mod period` of the position output.
// `offset`: the table holds rows offset .. offset + vocab - 1 of a vocabulary (one GPU's share of an
// embedding split across GPUs, TensorRT-LLM's lookup); KF_ZERO_OUTSIDE: a row whose index falls
// outside the table is written as zeros (where the output is summed over the GPUs' shares).
// `scale`: each row copied times it (T5's and Gemma's embedding times sqrt(d_model); 1 for a copy).
#ifndef TPR
#define TPR 64
#endif
#ifndef RPB
#define RPB 4
#endif
#define KF_THREADS (TPR * RPB)
#ifndef KF_SCATTER
#define KF_SCATTER 0
#endif
#ifndef KF_SCATTER_ADD
#define KF_SCATTER_ADD 0
#endif
#ifndef KF_ZERO_OUTSIDE
#define KF_ZERO_OUTSIDE 0
#endif
#ifndef KF_GATHER_SCALE
#define KF_GATHER_SCALE 0
#endif

// a store of the copy, or with KF_SCATTER_ADD (fp32 y) an atomic add: rows an index names twice add up
__device__ __forceinline__ void kf_gather_put4(kf_y_t* p, float4 v)
{
#if KF_SCATTER_ADD
    atomicAdd(p, v.x); atomicAdd(p + 1, v.y); atomicAdd(p + 2, v.z); atomicAdd(p + 3, v.w);
#else
    kf_sts4(p, v);
#endif
}

// the position output of a scatter-add (llm.c's dwpe: each source row also added into row `row mod
// period`), passed as the gather's position table
__device__ __forceinline__ kf_y_t* kf_pos_out(const kf_pos_t* p) { return (kf_y_t*)const_cast<kf_pos_t*>(p); }

__device__ __forceinline__ void kf_gather_put(kf_y_t* p, float v)
{
#if KF_SCATTER_ADD
    atomicAdd(p, v);
#else
    kf_st(p, v);
#endif
}
#define KF_GATHER_U 3               // 4 spilled in the scatter (ptxas aims at 32 registers for full occupancy)

// KF_GATHER_U 4-value vectors of one row, TPR * 4 values apart from j on (GUARD: only those inside
// the row): every load, then every store
template <bool GUARD>
__device__ __forceinline__ void kf_gather_step(const kf_table_t* __restrict__ src, const kf_pos_t* __restrict__ add,
                                               kf_y_t* __restrict__ dst, long long j, long long cols, float scale)
{
    constexpr long long STEP = 4LL * TPR;
    float4 v[KF_GATHER_U];
#pragma unroll
    for (int u = 0; u < KF_GATHER_U; ++u) {
        if (GUARD && j + STEP * u >= cols) break;
        v[u] = kf_ld4(src + j + STEP * u);
        if (KF_GATHER_SCALE) {
            v[u].x *= scale; v[u].y *= scale; v[u].z *= scale; v[u].w *= scale;
        }
        if (KF_HAS_POS && !KF_SCATTER_ADD) {
            const float4 p = kf_ld4(add + j + STEP * u);
            v[u].x += p.x; v[u].y += p.y; v[u].z += p.z; v[u].w += p.w;
        }
    }
#pragma unroll
    for (int u = 0; u < KF_GATHER_U; ++u) {
        if (GUARD && j + STEP * u >= cols) break;
        kf_gather_put4(dst + j + STEP * u, v[u]);
        if (KF_HAS_POS && KF_SCATTER_ADD) kf_gather_put4(kf_pos_out(add) + j + STEP * u, v[u]);
    }
}

// rows = outer * nidx output rows (a gather) or source rows (a scatter); with outer > 1 (an index_select
// along a middle axis) row o * nidx + i uses index[i] within block o of vocab table (or y) rows
__device__ __forceinline__ void kf_gather(const kf_index_t* __restrict__ index, const kf_table_t* __restrict__ table,
                                          const kf_pos_t* __restrict__ pos, kf_y_t* __restrict__ y, long long rows,
                                          long long cols, long long period, long long nidx, long long vocab,
                                          long long offset, float scale)
{
    const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    if (row >= rows) return;
    const long long o = row / nidx;
    const long long id = (long long)index[row - o * nidx] - offset;
    if (KF_ZERO_OUTSIDE && (id < 0 || id >= vocab)) {
        for (long long j = t; j < cols; j += TPR) kf_st(y + row * cols + j, 0.0f);
        return;
    }
    if (id < 0) return;
    const long long at = o * vocab + id;
    const kf_table_t* __restrict__ src = table + (KF_SCATTER ? row : at) * cols;
    const kf_pos_t* __restrict__ add = KF_HAS_POS ? pos + (row % period) * cols : nullptr;
    kf_y_t* __restrict__ dst = y + (KF_SCATTER ? at : row) * cols;
    if (cols % 4 == 0 && kf_aligned4(table) && kf_aligned4(y) && kf_aligned4(pos)) {
        // KF_GATHER_U vectors of the row a step, their loads all issued before the first store (as a
        // plain loop, even unrolled, each store went out before the next vector's loads: a row of 768
        // floats took three round trips one after another at 64 threads a row); the last step's
        // vectors past the row are left out
        long long j = 4LL * t;
#pragma unroll 1
        for (; j + 4LL * TPR * (KF_GATHER_U - 1) < cols; j += 4LL * TPR * KF_GATHER_U) {
            kf_gather_step<false>(src, add, dst, j, cols, scale);
        }
        if (j < cols) {
            kf_gather_step<true>(src, add, dst, j, cols, scale);
        }
    } else {
        for (long long j = t; j < cols; j += TPR) {
            const float v = kf_ld(src + j) * (KF_GATHER_SCALE ? scale : 1.0f);
            kf_gather_put(dst + j, v + (KF_HAS_POS && !KF_SCATTER_ADD ? kf_ld(add + j) : 0.0f));
            if (KF_HAS_POS && KF_SCATTER_ADD) kf_gather_put(kf_pos_out(add) + j, v);
        }
    }
}
