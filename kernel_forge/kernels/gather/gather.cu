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
// negative index (a padding token) writes nothing.
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

__device__ __forceinline__ void kf_gather(const kf_index_t* __restrict__ index, const kf_table_t* __restrict__ table,
                                          const kf_pos_t* __restrict__ pos, kf_y_t* __restrict__ y, long long rows,
                                          long long cols, long long period)
{
    const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    if (row >= rows) return;
    const long long id = (long long)index[row];
    if (id < 0) return;
    const kf_table_t* __restrict__ src = table + (KF_SCATTER ? row : id) * cols;
    const kf_pos_t* __restrict__ add = KF_HAS_POS ? pos + (row % period) * cols : nullptr;
    kf_y_t* __restrict__ dst = y + (KF_SCATTER ? id : row) * cols;
    if (cols % 4 == 0 && kf_aligned4(table) && kf_aligned4(y) && kf_aligned4(pos)) {
        for (long long j = 4LL * t; j < cols; j += 4LL * TPR) {
            float4 v = kf_ld4(src + j);
            if (KF_HAS_POS) {
                const float4 p = kf_ld4(add + j);
                v.x += p.x; v.y += p.y; v.z += p.z; v.w += p.w;
            }
            kf_sts4(dst + j, v);
        }
    } else {
        for (long long j = t; j < cols; j += TPR) kf_st(dst + j, kf_ld(src + j) + (KF_HAS_POS ? kf_ld(add + j) : 0.0f));
    }
}
