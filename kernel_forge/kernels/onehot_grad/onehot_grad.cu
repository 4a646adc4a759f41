// kforge: grid = [@@ROWS@@, max(1, cdiv(@@COLS@@, 4 * BLOCK * VPT)), 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune VPT = [2, 1, 4]
// kforge: tune STREAM = [1, 0]
// Bound pattern onehot_grad: cross-entropy's gradient through a softmax, y[r, c] = (x[r, c] -
// (c == index[r])) * scale (KF_ACCUMULATE: added to y).  The scale is the row's w[r] (KF_ROW_SCALE,
// llm.c's dlosses), or a scalar.  Block (r, t) owns columns [t * 4 * BLOCK * VPT, ...) of row r: the
// row's target and scale are read once a block, and no thread divides.  A thread loads VPT groups of
// 4 values (16 bytes for float) before any store; rows whose cols is not a multiple of 4, or
// unaligned buffers, take the one-value-at-a-time path.  A target outside the row leaves the row 0
// (or y as it was, when adding).  STREAM 1: x and y past the caches.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VPT
#define VPT 2
#endif
#ifndef STREAM
#define STREAM 1
#endif
#define KF_THREADS BLOCK

__device__ __forceinline__ float kf_onehot_one(float xv, long long c, long long id, float s, const kf_y_t* yp)
{
    const float g = (xv - (c == id ? 1.0f : 0.0f)) * s;
    return KF_ACCUMULATE ? kf_ld(yp) + g : g;
}

__device__ __forceinline__ void kf_onehot_grad(const kf_x_t* x, const kf_index_t* index, const kf_w_t* w, kf_y_t* y,
                                               long long cols, float alpha)
{
    const long long row = blockIdx.x;
    const long long c0 = (long long)blockIdx.y * (4LL * BLOCK * VPT);
    const long long id = (long long)index[row];
    const float s = KF_ROW_SCALE ? kf_ld(w + row) : alpha;
    const kf_x_t* xr = x + row * cols;
    kf_y_t* yr = y + row * cols;
    const bool valid = id >= 0 && id < cols;
    if (!valid && KF_ACCUMULATE) return;
    if (cols % 4 == 0 && kf_aligned4(x) && kf_aligned4(y)) {
        float4 xv[VPT];
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long c = c0 + 4LL * (threadIdx.x + (long long)i * BLOCK);
            if (c < cols) xv[i] = STREAM ? kf_lds4(xr + c) : kf_ld4(xr + c);
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long c = c0 + 4LL * (threadIdx.x + (long long)i * BLOCK);
            if (c >= cols) continue;
            float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (valid) {
                o.x = kf_onehot_one(xv[i].x, c, id, s, yr + c);
                o.y = kf_onehot_one(xv[i].y, c + 1, id, s, yr + c + 1);
                o.z = kf_onehot_one(xv[i].z, c + 2, id, s, yr + c + 2);
                o.w = kf_onehot_one(xv[i].w, c + 3, id, s, yr + c + 3);
            }
            if (STREAM) kf_sts4(yr + c, o); else kf_st4(yr + c, o);
        }
    } else {
        const long long end = min(cols, c0 + 4LL * BLOCK * VPT);
        for (long long c = c0 + threadIdx.x; c < end; c += BLOCK) {
            kf_st(yr + c, valid ? kf_onehot_one(kf_ld(xr + c), c, id, s, yr + c) : 0.0f);
        }
    }
}
