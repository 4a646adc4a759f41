// kforge: grid = [cdiv(@@COLS@@, BX * ITEMS), @@ROWS@@, 1]
// kforge: block = [BX, 1, 1]
// kforge: shared_mem = 4 * (BX * ITEMS + 2 * (@@RADIUS@@))
// kforge: tune BX = [128, 256, 64]
// kforge: tune ITEMS = [4, 8, 2, 1]
// Bound pattern box_filter (along the rows): a block owns BX * ITEMS pixels of one row.  It reads
// them with the r pixels on each side into shared memory once (coalesced; edges clamped or zero),
// then each output is the sum of its 2r+1 neighbours read from shared memory -- consecutive
// threads read consecutive words, no bank conflicts.  Every input pixel is read from global
// memory about once.
#ifndef BX
#define BX 128
#endif
#ifndef ITEMS
#define ITEMS 4
#endif
#define KF_THREADS BX

__device__ __forceinline__ void kf_box_filter(const kf_x_t* __restrict__ x, kf_y_t* __restrict__ y,
                                              long long rows, long long cols, long long r)
{
    extern __shared__ float kf_tile[];
    const long long row = blockIdx.y;
    const long long c0 = (long long)blockIdx.x * (BX * ITEMS);
    if (row >= rows) return;
    const kf_x_t* __restrict__ xr = x + row * cols;
    const long long width = BX * ITEMS + 2 * r;
    for (long long i = threadIdx.x; i < width; i += BX) {
        long long c = c0 - r + i;
#if KF_EDGE_CLAMP
        c = c < 0 ? 0 : (c >= cols ? cols - 1 : c);
        kf_tile[i] = kf_ld(xr + c);
#else
        kf_tile[i] = (c < 0 || c >= cols) ? 0.0f : kf_ld(xr + c);
#endif
    }
    __syncthreads();
    const float scale = KF_MEAN ? 1.0f / (float)(2 * r + 1) : 1.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const long long j = (long long)k * BX + threadIdx.x;    // the output's place in the block's span
        if (c0 + j >= cols) break;
        float t = 0.0f;
        for (long long d = 0; d <= 2 * r; ++d) t += kf_tile[j + d];
        kf_st(y + row * cols + c0 + j, t * scale);
    }
}
