// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [32 * RPB, 1, 1]
// kforge: tune RPB = [4, 8, 2, 1]
// kforge: tune ITEMS = [4, 8, 2, 1]
// Bound pattern scan (per row): one warp per row, RPB rows per block.  The warp walks its row in
// tiles of 32 * ITEMS values: each lane scans its ITEMS consecutive values in registers, the warp
// scans the lanes' totals with shuffles, and a running carry (the sum of the tiles before) moves
// from tile to tile -- one read and one write per element, no shared memory, no atomics, the sums
// taken in the same order every launch.  KF_EXCLUSIVE: y[i] = x[0] + ... + x[i-1].  Sums are kept
// as kf_acc_t: float, or for KF_INT_SCAN the integer type of y (exact).  Rows of `cols` values, `n`
// in all (the last row short where n < rows * cols: a scan of each block's tile of a flat array);
// KF_TOTALS: each row's total also written to totals[row] (the block sums a multi-pass scan's first
// kernel leaves for the next).  KF_REVERSE: each row summed from its end (element i of the scan is
// element len - 1 - i of the row).
#ifndef KF_TOTALS
#define KF_TOTALS 0
#endif
#ifndef RPB
#define RPB 4
#endif
#ifndef ITEMS
#define ITEMS 4
#endif
#ifndef KF_REVERSE
#define KF_REVERSE 0
#endif
#define KF_AT(i, n) (KF_REVERSE ? (n) - 1 - (i) : (i))
#define KF_THREADS (32 * RPB)
#if KF_INT_SCAN
#define KF_GET(p) ((kf_acc_t)*(p))
#define KF_PUT(p, v) (*(p) = (kf_y_t)(v))
#else
#define KF_GET(p) kf_ld(p)
#define KF_PUT(p, v) kf_st(p, v)
#endif

__device__ __forceinline__ void kf_scan_rows(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                             long long rows, long long cols, long long n,
                                             kf_totals_t* __restrict__ totals)
{
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * RPB + (threadIdx.x >> 5);
    if (row >= rows) return;
    const kf_x_t* xr = x + row * cols;
    kf_y_t* yr = y + row * cols;
    const long long len = n - row * cols < cols ? n - row * cols : cols;
    kf_acc_t carry = (kf_acc_t)0;
    for (long long t = 0; t < len; t += 32 * ITEMS) {
        const long long base = t + (long long)lane * ITEMS;
        kf_acc_t v[ITEMS];
        kf_acc_t run = (kf_acc_t)0;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            v[i] = (base + i < len) ? KF_GET(xr + KF_AT(base + i, len)) : (kf_acc_t)0;
            run += v[i];
        }
        kf_acc_t inc = run;                          // inclusive scan of the lanes' totals
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const kf_acc_t u = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += u;
        }
        kf_acc_t acc = carry + inc - run;            // the sum of everything before this lane's values
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const kf_acc_t before = acc;
            acc += v[i];
            if (base + i < len) KF_PUT(yr + KF_AT(base + i, len), KF_EXCLUSIVE ? before : acc);
        }
        carry += __shfl_sync(0xffffffffu, inc, 31);
    }
#if KF_TOTALS
    if (lane == 0) {
#if KF_INT_SCAN
        totals[row] = (kf_totals_t)carry;
#else
        kf_st(totals + row, carry);
#endif
    }
#endif
}
