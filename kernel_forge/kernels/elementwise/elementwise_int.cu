// kforge: grid = [max(1, cdiv(@@N@@, @@LANES@@ * BLOCK * VPT)), 1, 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune VPT = [4, 2, 1]
// Bound pattern elementwise_int: an elementwise map or two-operand form of 32- or 64-bit integers,
// exact (sums, differences and products wrap as the storage type does, computed on unsigned
// bits): each block owns LANES * BLOCK * VPT consecutive elements; a thread loads VPT 16-byte
// vectors of each operand, all before any store, then applies kf_op lane by lane and stores.  The
// last, partial tile and unaligned buffers take the one-value-at-a-time path.  No __restrict__: y
// may be an input too.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VPT
#define VPT 4
#endif
#define KF_THREADS BLOCK
#define KF_LANES @@LANES@@

@@OP@@

__device__ __forceinline__ bool kf_aligned16(const void* p) { return ((unsigned long long)p & 15ULL) == 0; }

__device__ __forceinline__ void kf_elementwise_int(const kf_y_t* x, const kf_y_t* z, kf_y_t* y, long long n,
                                                   long long alpha)
{
    const long long tile = (long long)blockIdx.x * ((long long)KF_LANES * BLOCK * VPT);
    if (kf_aligned16(x) && kf_aligned16(z) && kf_aligned16(y) && tile + (long long)KF_LANES * BLOCK * VPT <= n) {
        uint4 xv[VPT], zv[VPT];
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + (long long)KF_LANES * (threadIdx.x + (long long)i * BLOCK);
            xv[i] = __ldcs(reinterpret_cast<const uint4*>(x + j));
            zv[i] = KF_HAS_Z ? __ldcs(reinterpret_cast<const uint4*>(z + j)) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long j = tile + (long long)KF_LANES * (threadIdx.x + (long long)i * BLOCK);
            kf_y_t a[KF_LANES], b[KF_LANES], r[KF_LANES];
            memcpy(a, &xv[i], 16);
            memcpy(b, &zv[i], 16);
#pragma unroll
            for (int l = 0; l < KF_LANES; ++l) r[l] = kf_op(a[l], b[l], alpha);
            uint4 o;
            memcpy(&o, r, 16);
            __stcs(reinterpret_cast<uint4*>(y + j), o);
        }
    } else {
        const long long end = min(n, tile + (long long)KF_LANES * BLOCK * VPT);
        for (long long j = tile + threadIdx.x; j < end; j += BLOCK)
            y[j] = kf_op(x[j], KF_HAS_Z ? z[j] : (kf_y_t)0, alpha);
    }
}
