// kforge: grid = [max(1, cdiv(@@N@@, BLOCK * ITEMS)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 512, 128, 1024]
// kforge: tune ITEMS = [8, 16, 4]
// kforge: constraint BLOCK * ITEMS >= 1024
// Bound pattern scan: a single-pass prefix sum with decoupled look-back.  Blocks take tiles of
// BLOCK * ITEMS values in the order they start (an atomic ticket, so a tile never waits on one
// that has not started); each thread scans its ITEMS consecutive values, the block scans the
// thread totals (warp shuffles, then the warp totals), and thread 0 publishes the tile's total,
// walks back over earlier tiles until one has published its inclusive prefix, then adds the
// totals it passed in tile order and publishes its own inclusive prefix.
// Deterministic: adding forward from the inclusive prefix found gives, bit for bit, the chained
// sum ((inc[0] + tot[1]) + tot[2]) + ..., whichever tiles had finished when the walk began; a walk
// that added backward (tot[t-1] + tot[t-2] + ... + inc[p]) would round differently from run to run.
// Flag and value travel in one 64-bit word, so no fence is needed between them.  The words are
// module globals, zero at every launch (the gate restores module globals before each launch); at
// most KF_MAX_TILES tiles (n <= 2^17 * BLOCK * ITEMS).  Sums are kept as kf_acc_t: float, or for
// KF_INT_SCAN the 32-bit integer type of y (exact, wrapping as the reference's fixed-width sum does).
// KF_TOTALS: the sum of every value also written to totals[0] (a compaction's count), by the last tile.
// KF_REVERSE: summed from the end (y[i] = x[i] + ... + x[n - 1], flip-cumsum-flip): element i of the scan
// is element n - 1 - i of x and y.
#ifndef KF_TOTALS
#define KF_TOTALS 0
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 8
#endif
#ifndef KF_REVERSE
#define KF_REVERSE 0
#endif
#define KF_AT(i, n) (KF_REVERSE ? (n) - 1 - (i) : (i))
#define KF_THREADS BLOCK
#define KF_MAX_TILES (1 << 17)

__device__ unsigned long long kf_tile_total[KF_MAX_TILES];     // (1, tile total) once published
__device__ unsigned long long kf_tile_inclusive[KF_MAX_TILES]; // (1, inclusive prefix) once published
__device__ unsigned int kf_tile_ticket;

#if KF_INT_SCAN
#define KF_GET(p) ((kf_acc_t)*(p))
#define KF_PUT(p, v) (*(p) = (kf_y_t)(v))
#define KF_BITS(v) ((unsigned)(v))
#define KF_FROM_BITS(u) ((kf_acc_t)(u))
#else
#define KF_GET(p) kf_ld(p)
#define KF_PUT(p, v) kf_st(p, v)
#define KF_BITS(v) __float_as_uint(v)
#define KF_FROM_BITS(u) __uint_as_float(u)
#endif

__device__ __forceinline__ void kf_publish(unsigned long long* word, kf_acc_t v)
{
    atomicExch(word, (1ull << 32) | (unsigned long long)KF_BITS(v));
}

__device__ __forceinline__ unsigned long long kf_peek(const unsigned long long* word)
{
    return *(const volatile unsigned long long*)word;
}

__device__ __forceinline__ kf_acc_t kf_value(unsigned long long s)
{
    return KF_FROM_BITS((unsigned)(s & 0xffffffffu));
}

__device__ __forceinline__ void kf_scan(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y, long long n,
                                        kf_totals_t* __restrict__ totals)
{
    __shared__ kf_acc_t warp_tot[BLOCK / 32];
    __shared__ kf_acc_t tile_prefix;
    __shared__ unsigned int tile_id;
    if (threadIdx.x == 0) tile_id = atomicAdd(&kf_tile_ticket, 1u);
    __syncthreads();
    const unsigned tile = tile_id;
    if (tile >= KF_MAX_TILES) return;
    const long long base = (long long)tile * (BLOCK * ITEMS) + (long long)threadIdx.x * ITEMS;
    kf_acc_t v[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) v[i] = (base + i < n) ? KF_GET(x + KF_AT(base + i, n)) : (kf_acc_t)0;
    kf_acc_t run = (kf_acc_t)0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        run += v[i];
        v[i] = KF_EXCLUSIVE ? run - v[i] : run;
    }
    // exclusive scan of the thread totals over the block
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    kf_acc_t inc = run;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const kf_acc_t u = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += u;
    }
    if (lane == 31) warp_tot[warp] = inc;
    __syncthreads();
    kf_acc_t before = (kf_acc_t)0, total = (kf_acc_t)0;
#pragma unroll
    for (int k = 0; k < BLOCK / 32; ++k) {
        const kf_acc_t t = warp_tot[k];
        before += (k < warp) ? t : (kf_acc_t)0;
        total += t;
    }
    before += inc - run;
    if (threadIdx.x == 0) {
        kf_acc_t prefix = (kf_acc_t)0;
        if (tile == 0) {
            kf_publish(&kf_tile_inclusive[0], total);
        } else {
            kf_publish(&kf_tile_total[tile], total);
            // back to the nearest tile p with an inclusive prefix (tile 0 always gets one) ...
            long long p = (long long)tile - 1;
            unsigned long long s;
            for (;;) {
                s = kf_peek(&kf_tile_inclusive[p]);
                if (s >> 32) break;
                if (kf_peek(&kf_tile_total[p]) >> 32) --p;
            }
            // ... then forward, in tile order, over the totals passed
            prefix = kf_value(s);
            for (long long q = p + 1; q < (long long)tile; ++q) prefix += kf_value(kf_peek(&kf_tile_total[q]));
            kf_publish(&kf_tile_inclusive[tile], prefix + total);
        }
        tile_prefix = prefix;
#if KF_TOTALS
        if ((long long)(tile + 1) * (BLOCK * ITEMS) >= n) totals[0] = (kf_totals_t)(prefix + total);
#endif
    }
    __syncthreads();
    const kf_acc_t add = tile_prefix + before;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        if (base + i < n) KF_PUT(y + KF_AT(base + i, n), v[i] + add);
    }
}
