// kforge: grid = [@@ROWS@@, max(1, cdiv(@@COLS@@, 4 * BLOCK * VPT)), 1]
// kforge: block = [BLOCK, 1, 1]
// kforge: tune BLOCK = [256, 128, 512, 1024]
// kforge: tune VPT = [2, 1, 4]
// kforge: tune STREAM = [1, 2, 0]
// kforge: constraint BLOCK * VPT <= 4096
// Bound pattern gated_halves: y[r, c] = act(x[r, c]) * z[r, c] where x and z are the two halves of
// each row of one buffer of rows of 2 * cols values (vLLM's and SGLang's act_and_mul: the gate and
// up projections side by side).  Block (r, t) owns columns [t * 4 * BLOCK * VPT, ...) of row r: the
// grid's x is the row count, so a kernel that is given only the column count (the rows implied by
// its launch) still knows where to stop; no division anywhere.  A thread loads VPT groups of 4
// values of both halves (16 bytes each for float) before any store; a row whose cols is not a
// multiple of 4, or unaligned buffers, take the one-value-at-a-time path.  STREAM as in the
// elementwise pattern: 1 loads and stores past the caches, 2 the loads only, 0 neither.
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

@@OP@@

__device__ __forceinline__ void kf_gated_halves(const kf_x_t* x, const kf_x_t* z, kf_y_t* y, long long cols)
{
    const long long row = blockIdx.x;
    const long long c0 = (long long)blockIdx.y * (4LL * BLOCK * VPT);
    const kf_x_t* xr = x + row * 2 * cols;
    const kf_x_t* zr = z + row * 2 * cols;
    kf_y_t* yr = y + row * cols;
    if (cols % 4 == 0 && kf_aligned4(x) && kf_aligned4(z) && kf_aligned4(y)) {
        float4 xv[VPT], zv[VPT];
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long c = c0 + 4LL * (threadIdx.x + (long long)i * BLOCK);
            if (c < cols) {
                xv[i] = STREAM ? kf_lds4(xr + c) : kf_ld4(xr + c);
                zv[i] = STREAM ? kf_lds4(zr + c) : kf_ld4(zr + c);
            }
        }
#pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const long long c = c0 + 4LL * (threadIdx.x + (long long)i * BLOCK);
            if (c < cols) {
                float4 o;
                o.x = kf_op(xv[i].x, zv[i].x, 0.0f, 0.0f, 1.0f, 0.0f);
                o.y = kf_op(xv[i].y, zv[i].y, 0.0f, 0.0f, 1.0f, 0.0f);
                o.z = kf_op(xv[i].z, zv[i].z, 0.0f, 0.0f, 1.0f, 0.0f);
                o.w = kf_op(xv[i].w, zv[i].w, 0.0f, 0.0f, 1.0f, 0.0f);
                if (STREAM == 1) kf_sts4(yr + c, o); else kf_st4(yr + c, o);
            }
        }
    } else {
        const long long end = min(cols, c0 + 4LL * BLOCK * VPT);
        for (long long c = c0 + threadIdx.x; c < end; c += BLOCK) {
            kf_st(yr + c, kf_op(kf_ld(xr + c), kf_ld(zr + c), 0.0f, 0.0f, 1.0f, 0.0f));
        }
    }
}
