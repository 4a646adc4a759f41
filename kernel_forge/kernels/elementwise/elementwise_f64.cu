// kforge: grid = [max(1, cdiv(@@N@@, 2 * BLOCK * VPT)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune VPT = [4, 2, 1]
// Bound pattern elementwise_f64: elementwise's maps and two-operand forms on double storage,
// computed in double (daxpy, a double vector's activation): each block owns 2 * BLOCK * VPT
// consecutive elements; a thread loads VPT pairs (16 bytes) of each operand, all before any store,
// then applies kf_op and stores.  The last, partial tile and unaligned buffers take the
// one-value-at-a-time path.  No __restrict__: y may be an input too (daxpy's y = a x + y).
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VPT
#define VPT 4
#endif
#define KF_THREADS BLOCK

@@OP@@

__device__ __forceinline__ bool kf_aligned16(const void* p) { return ((unsigned long long)p & 15ULL) == 0; }

__device__ __forceinline__ void kf_elementwise_f64(const double* x, const double* z, double* y, long long n,
                                                   double alpha, double beta)
{
    const long long tile = (long long)blockIdx.x * (2LL * BLOCK * VPT);
    if (kf_aligned16(x) && kf_aligned16(z) && kf_aligned16(y) && tile + 2LL * BLOCK * VPT <= n) {
        double2 xv[VPT], zv[VPT];
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + 2LL * (threadIdx.x + (long long)i * BLOCK);
            xv[i] = __ldcs(reinterpret_cast<const double2*>(x + j));
            zv[i] = KF_HAS_Z ? __ldcs(reinterpret_cast<const double2*>(z + j)) : make_double2(0.0, 0.0);
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + 2LL * (threadIdx.x + (long long)i * BLOCK);
            __stcs(reinterpret_cast<double2*>(y + j),
                   make_double2(kf_op(xv[i].x, zv[i].x, alpha, beta), kf_op(xv[i].y, zv[i].y, alpha, beta)));
        }
    } else {
        const long long end = min(n, tile + 2LL * BLOCK * VPT);
        for (long long j = tile + threadIdx.x; j < end; j += BLOCK)
            y[j] = kf_op(x[j], KF_HAS_Z ? z[j] : 0.0, alpha, beta);
    }
}
