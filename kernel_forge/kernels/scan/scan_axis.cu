// kforge: grid = [cdiv(@@POSITIONS@@, TI), 1, 1]
// kforge: block = [TI, TY, 1]
// kforge: tune TI = [32, 64, 128]
// kforge: tune TY = [8, 4, 16, 2]
// kforge: tune UNROLL = [4, 8, 2]
// kforge: constraint TI * TY <= 1024 and TI * TY >= 64
// Bound pattern scan over an axis that is not the last (cumsum(x, dim=0) of a matrix: each column's
// running sum; dim=1 of N x C x HW).  Each of the outer * inner positions is a prefix sum of `axis`
// values `inner` apart: TI consecutive positions per block, so a warp's loads of one index along
// the axis are consecutive addresses.  The block walks the axis in tiles of TY * UNROLL: each of a
// position's TY threads loads UNROLL consecutive values (all loads in flight), their totals are
// added in shared memory in a fixed order (deterministic) to the carry of the tiles before, and each
// thread writes its running sums (KF_EXCLUSIVE: the sum before each value) -- every value read once
// and written once.  Sums are kept as kf_acc_t: float, or for KF_INT_SCAN the integer type of y (exact).
#ifndef TI
#define TI 32
#endif
#ifndef TY
#define TY 8
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#define KF_THREADS (TI * TY)
#if KF_INT_SCAN
#define KF_GET(p) ((kf_acc_t)*(p))
#define KF_PUT(p, v) (*(p) = (kf_y_t)(v))
#else
#define KF_GET(p) kf_ld(p)
#define KF_PUT(p, v) kf_st(p, v)
#endif

__device__ __forceinline__ void kf_axis_scan(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                             long long outer, long long axis, long long inner)
{
    __shared__ kf_acc_t part[TY][TI];
    const long long p = (long long)blockIdx.x * TI + threadIdx.x;
    const bool valid = p < outer * inner;
    const long long o = valid ? p / inner : 0;
    const long long base = o * axis * inner + (valid ? p - o * inner : 0);
    const kf_x_t* __restrict__ xp = x + base;
    kf_y_t* __restrict__ yp = y + base;
    const long long n = valid ? axis : 0;

    kf_acc_t carry = (kf_acc_t)0;                  // the tiles before, the same in each of the TY threads
    for (long long t0 = 0; t0 < axis; t0 += TY * UNROLL) {      // every thread takes every tile: barriers agree
        const long long r0 = t0 + (long long)threadIdx.y * UNROLL;
        kf_acc_t a[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) a[u] = r0 + u < n ? KF_GET(xp + (r0 + u) * inner) : (kf_acc_t)0;
        kf_acc_t mine = (kf_acc_t)0;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) mine += a[u];
        part[threadIdx.y][threadIdx.x] = mine;
        __syncthreads();
        kf_acc_t run = carry;
#pragma unroll
        for (int k = 0; k < TY; ++k) {
            const kf_acc_t t = part[k][threadIdx.x];
            if (k < (int)threadIdx.y) run += t;
            carry += t;
        }
        __syncthreads();                            // the totals read before the next tile writes them
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (r0 + u < n) {
                if (KF_EXCLUSIVE) KF_PUT(yp + (r0 + u) * inner, run);
                run += a[u];
                if (!KF_EXCLUSIVE) KF_PUT(yp + (r0 + u) * inner, run);
            }
        }
    }
}
