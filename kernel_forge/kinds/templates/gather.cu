// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [TPR * RPB, 1, 1]
// kforge: tune TPR = [64, 32, 128, 256]
// kforge: tune RPB = [4, 1, 2, 8]
// kforge: constraint TPR * RPB <= 1024 and TPR * RPB >= 64
// Bound pattern gather: TPR threads copy one output row, table[index[row]], RPB rows per block;
// 4 values per access (16 bytes for float) when cols % 4 == 0 and the buffers are aligned, the
// output written with evict-first stores.  An index outside the table writes nothing.
#ifndef TPR
#define TPR 64
#endif
#ifndef RPB
#define RPB 4
#endif
#define KF_THREADS (TPR * RPB)

__device__ __forceinline__ void kf_gather(const kf_index_t* __restrict__ index, const kf_table_t* __restrict__ table,
                                          kf_y_t* __restrict__ y, long long rows, long long cols)
{
    const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    if (row >= rows) return;
    const long long id = (long long)index[row];
    if (id < 0) return;
    const kf_table_t* __restrict__ src = table + id * cols;
    kf_y_t* __restrict__ dst = y + row * cols;
    if (cols % 4 == 0 && kf_aligned4(table) && kf_aligned4(y)) {
        for (long long j = 4LL * t; j < cols; j += 4LL * TPR) kf_sts4(dst + j, kf_ld4(src + j));
    } else {
        for (long long j = t; j < cols; j += TPR) kf_st(dst + j, kf_ld(src + j));
    }
}
