// kforge: grid = [max(1, cdiv(@@ROWS@@, BLOCK * RPT)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [128, 64, 256, 512]
// kforge: tune RPT = [4, 1, 2, 8]
// kforge: tune NC = [1, 0]
// Bound pattern row_pick: y[r] = f(table[r, index[r]]), one element of each row picked by an
// integer index (cross-entropy's -log(probs[r, target[r]])).  Each block owns BLOCK * RPT rows; a
// thread takes RPT rows BLOCK apart, so every index read and every store is coalesced across the
// warp.  The table reads land one per row, anywhere in the row: latency-bound, so a thread issues
// all its RPT index loads, then all its RPT table loads (independent, in flight together), then
// the stores.  The index is read once (evict-first); the table element through the read-only path
// (NC = 1: ld.global.nc) or evict-first (NC = 0: the rest of its sector is never read again).  An
// index outside [0, cols) writes nothing, or 0 (KF_IGNORED_ZERO: PyTorch's ignore_index).  With
// `picks` indices a table row (torch.gather along the last axis: y[r, j] = f(table[r, index[r, j]])),
// output r reads table row r / picks; `rows` counts the outputs.
#ifndef BLOCK
#define BLOCK 128
#endif
#ifndef RPT
#define RPT 4
#endif
#ifndef NC
#define NC 1
#endif
#define KF_THREADS BLOCK
#ifndef KF_IGNORED_ZERO
#define KF_IGNORED_ZERO 0
#endif

@@OP@@

__device__ __forceinline__ void kf_row_pick(const kf_index_t* __restrict__ index, const kf_table_t* __restrict__ table,
                                            kf_y_t* __restrict__ y, long long rows, long long cols, long long picks)
{
    const long long first = (long long)blockIdx.x * (BLOCK * RPT) + threadIdx.x;
    long long id[RPT];
#pragma unroll
    for (int i = 0; i < RPT; ++i) {                 // coalesced: lane l of the warp reads index[first + l]
        const long long r = first + (long long)i * BLOCK;
        id[i] = r < rows ? (long long)__ldcs(index + r) : -1LL;
    }
    kf_table_t t[RPT];
#pragma unroll
    for (int i = 0; i < RPT; ++i) {                 // RPT independent scattered loads in flight
        const long long r = first + (long long)i * BLOCK;
        if (id[i] >= 0 && id[i] < cols) {
            const long long tr = picks == 1 ? r : (long long)((unsigned long long)r / (unsigned long long)picks);
            const kf_table_t* p = table + tr * cols + id[i];
            t[i] = NC ? __ldg(p) : __ldcs(p);
        }
    }
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        const long long r = first + (long long)i * BLOCK;
        if (id[i] >= 0 && id[i] < cols) {
            kf_y_t o;
            kf_st(&o, kf_op(kf_ld(&t[i])));
            __stcs(y + r, o);
        } else if (KF_IGNORED_ZERO && r < rows) {   // an ignored target (ignore_index): a 0 loss
            kf_y_t o;
            kf_st(&o, 0.0f);
            __stcs(y + r, o);
        }
    }
}
