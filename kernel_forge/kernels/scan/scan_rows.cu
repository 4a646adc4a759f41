// kforge: grid = [cdiv(@@ROWS@@, RPB), 1, 1]
// kforge: block = [32 * RPB, 1, 1]
// kforge: tune RPB = [4, 8, 2, 1]
// kforge: tune ITEMS = [4, 8, 2, 1]
// Bound pattern scan (per row): one warp per row, RPB rows per block.  The warp walks its row in
// tiles of 32 * ITEMS values: each lane scans its ITEMS consecutive values in registers, the warp
// scans the lanes' totals with shuffles, and a running carry (the sum of the tiles before) moves
// from tile to tile -- one read and one write per element, no shared memory, no atomics, the sums
// taken in the same order every launch.  KF_EXCLUSIVE: y[i] = x[0] + ... + x[i-1].
#ifndef RPB
#define RPB 4
#endif
#ifndef ITEMS
#define ITEMS 4
#endif
#define KF_THREADS (32 * RPB)

__device__ __forceinline__ void kf_scan_rows(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                             long long rows, long long cols)
{
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * RPB + (threadIdx.x >> 5);
    if (row >= rows) return;
    const kf_x_t* xr = x + row * cols;
    kf_y_t* yr = y + row * cols;
    float carry = 0.0f;
    for (long long t = 0; t < cols; t += 32 * ITEMS) {
        const long long base = t + (long long)lane * ITEMS;
        float v[ITEMS];
        float run = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            v[i] = (base + i < cols) ? kf_ld(xr + base + i) : 0.0f;
            run += v[i];
        }
        float inc = run;                          // inclusive scan of the lanes' totals
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float u = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += u;
        }
        float acc = carry + inc - run;            // the sum of everything before this lane's values
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const float before = acc;
            acc += v[i];
            if (base + i < cols) kf_st(yr + base + i, KF_EXCLUSIVE ? before : acc);
        }
        carry += __shfl_sync(0xffffffffu, inc, 31);
    }
}
