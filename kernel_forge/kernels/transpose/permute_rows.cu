// kforge: grid = [@@SLABS@@, cdiv(@@COLS@@, TYB * RPT), @@PARTS@@]
// kforge: block = [TX, TYB, 1]
// kforge: tune TX = [16, 32, 8, 64]
// kforge: tune TYB = [16, 8, 4, 32]
// kforge: tune RPT = [2, 1, 4]
// kforge: constraint TX * TYB >= 64 and TX * TYB <= 1024
// Bound pattern permute_rows: two axes of an array swapped with a contiguous run of `inner` values
// after them -- x viewed as [outer, rows, mid, cols, inner] becomes y [outer, cols, mid, rows, inner]
// (a 0213 permute of attention heads: [B, H, T, D] -> [B, T, H, D]).  Each run moves whole: block
// (s, t) owns slab s = (outer, row, mid) of x, cols contiguous runs, and TYB * RPT of them; its
// threads copy each run 16 bytes at a time (when a run is a multiple of 16 bytes and both buffers
// aligned, else value by value), RPT runs' loads issued before their stores.  The slab's place
// comes from one division per block; values are copied as stored.  KF_PARTS > 1: x holds that many
// parts, `part` values of each in turn (llm.c's qkv [B, N, 3, NH, d]: a part is NH * d), each
// permuted into its own output (y, y1, y2, y3); blockIdx.z is the part, and a slab's run stays
// inside its part (part is a multiple of cols * inner).  KF_BIAS: bias[p % blen] is added to x's value
// at p as it moves (attention's q, k, v biases added as the heads are permuted: FasterTransformer's
// add_QKV_bias_transpose, ONNX Runtime's AddBiasTranspose), in float, each run's bias contiguous
// where blen is a multiple of the run.
#ifndef KF_PARTS
#define KF_PARTS 1
#endif
#ifndef KF_BIAS
#define KF_BIAS 0
#endif
#ifndef TX
#define TX 16
#endif
#ifndef TYB
#define TYB 16
#endif
#ifndef RPT
#define RPT 2
#endif
#define KF_THREADS (TX * TYB)

__device__ __forceinline__ void kf_permute_rows(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y0,
                                                kf_y_t* __restrict__ y1, kf_y_t* __restrict__ y2,
                                                kf_y_t* __restrict__ y3, long long rows, long long mid,
                                                long long cols, long long inner, long long part,
                                                const kf_bias_t* __restrict__ bias, long long blen)
{
    const long long s = blockIdx.x;
    const long long m = s % mid, outer_row = s / mid;
    const long long r = outer_row % rows, a = outer_row / rows;
#if KF_PARTS > 1
    const int j = blockIdx.z;
    kf_y_t* __restrict__ y = j == 0 ? y0 : j == 1 ? y1 : j == 2 ? y2 : y3;
    const long long at = s * cols * inner;                // the slab's place in its part
    const kf_x_t* __restrict__ src = x + (at / part) * (KF_PARTS * part) + j * part + at % part;
#else
    kf_y_t* __restrict__ y = y0;
    const kf_x_t* __restrict__ src = x + s * cols * inner;
#endif
    kf_y_t* __restrict__ dst = y + ((a * cols * mid + m) * rows + r) * inner;
    const long long step = mid * rows * inner;           // from one of y's runs to the next column's
    const long long c0 = (long long)blockIdx.y * (TYB * RPT) + threadIdx.y;
    const long long base = src - x;                      // x's index of the slab's first value (the bias's)
    const bool vec = (inner * (long long)sizeof(kf_x_t)) % 16 == 0 && ((unsigned long long)x % 16) == 0
                     && ((unsigned long long)y % 16) == 0 && (!KF_BIAS || blen % inner == 0);
    if (vec) {
        const long long nv = inner * (long long)sizeof(kf_x_t) / 16;
        constexpr int per = 16 / sizeof(kf_x_t);
        for (long long v = threadIdx.x; v < nv; v += TX) {
            uint4 q[RPT];
#pragma unroll
            for (int k = 0; k < RPT; ++k) {
                const long long c = c0 + k * TYB;
                if (c < cols) q[k] = __ldg(reinterpret_cast<const uint4*>(src + c * inner) + v);
            }
#if KF_BIAS
#pragma unroll
            for (int k = 0; k < RPT; ++k) {
                const long long c = c0 + k * TYB;
                if (c >= cols) continue;
                const kf_bias_t* __restrict__ bb = bias + (base + c * inner) % blen + v * per;
                kf_x_t* e = reinterpret_cast<kf_x_t*>(&q[k]);
#pragma unroll
                for (int u = 0; u < per; ++u) kf_st(e + u, kf_ld(e + u) + kf_ld(bb + u));
            }
#endif
#pragma unroll
            for (int k = 0; k < RPT; ++k) {
                const long long c = c0 + k * TYB;
                if (c < cols) reinterpret_cast<uint4*>(dst + c * step)[v] = q[k];
            }
        }
    } else {
        for (long long i = threadIdx.x; i < inner; i += TX) {
            kf_x_t q[RPT];
#pragma unroll
            for (int k = 0; k < RPT; ++k) {
                const long long c = c0 + k * TYB;
                if (c < cols) q[k] = src[c * inner + i];
#if KF_BIAS
                if (c < cols) {
                    long long bi = (base + c * inner) % blen + i;
                    if (bi >= blen) bi %= blen;
                    kf_st(&q[k], kf_ld(&q[k]) + kf_ld(bias + bi));
                }
#endif
            }
#pragma unroll
            for (int k = 0; k < RPT; ++k) {
                const long long c = c0 + k * TYB;
                if (c < cols) dst[c * step + i] = q[k];
            }
        }
    }
}
