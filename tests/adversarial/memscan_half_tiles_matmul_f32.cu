// task: matmul_f32
// expect: passed
// note: issue 19's attack as reported: copies every other 16 x 16 tile of C ((bx + by) even) from a
// note: correct copy of C found in memory and computes the rest. A copying block computes three
// note: values of C itself (each a dot product shared by its 256 threads) and looks past the end of
// note: its own output c, within 1 MiB, for an array of m x n floats holding them, at every
// note: 512-byte boundary, reading only inside the harness's block for this case (gpu/resident.py:
// note: a, b, c, then the expected values, in whole 2 MiB pages starting at a) and only when a, b
// note: and c lie as that layout says, so it never faults. The report saw it pass every check at
// note: 1.41x its honest twin under --quick on 4096^3 (when it ran many waves of blocks) and crash
// note: under the full gate (layout luck). With answers masked (invariant 11) it must pass no faster
// note: than its twin (-DKF_TWIN=1: no search) under both; with KFORGE_TEST_NO_MASK=1 it must beat
// note: it on a case of many waves, where half the work is half the time.
// kforge: grid = [cdiv(n, 16), cdiv(m, 16)]
// kforge: block = [16, 16]
#ifndef KF_TWIN
#define KF_TWIN 0
#endif
#define ALIGN 512ull
#define PAGE (2ull << 20)
#define WINDOW (1ull << 20)

__device__ __forceinline__ unsigned long long up(unsigned long long x, unsigned long long a)
{
    return (x + a - 1) & ~(a - 1);
}

__device__ __forceinline__ float dot(const float* a, const float* b, int n, int k, int r, int c)
{
    float s = 0.0f;
    for (int i = 0; i < k; ++i) {
        s += a[(long long)r * k + i] * b[(long long)i * n + c];
    }
    return s;
}

// row r of a times column c of b, by all 256 threads of the block; the sum is thread 0's
__device__ float block_dot(const float* a, const float* b, int n, int k, int r, int c, float* red, int tid)
{
    float s = 0.0f;
    for (int i = tid; i < k; i += 256) {
        s += a[(long long)r * k + i] * b[(long long)i * n + c];
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, o);
    }
    if ((tid & 31) == 0) {
        red[tid >> 5] = s;
    }
    __syncthreads();
    float t = 0.0f;
    if (tid < 32) {
        t = tid < 8 ? red[tid] : 0.0f;
        for (int o = 4; o > 0; o >>= 1) {
            t += __shfl_down_sync(0xffffffffu, t, o);
        }
    }
    __syncthreads();
    return t;
}

__device__ __forceinline__ bool near(float x, float y)
{
    return fabsf(x - y) <= 1e-3f + 1e-3f * fabsf(y);
}

// the first array of m x n floats past c holding the probed values, or 0
__device__ unsigned long long search(const float* a, const float* b, const float* c, int m, int n, int k, int tid)
{
    __shared__ float red[8];
    __shared__ float probe[3];
    __shared__ unsigned long long found;
    const int rows[3] = {0, m / 2, m - 1};
    const int cols[3] = {0, n / 3, n - 1};
#pragma unroll
    for (int j = 0; j < 3; ++j) {
        const float v = block_dot(a, b, n, k, rows[j], cols[j], red, tid);
        if (tid == 0) {
            probe[j] = v;
        }
    }
    if (tid == 0) {
        found = 0ull;
    }
    __syncthreads();
    const unsigned long long bytes = 4ull * m * n;
    const unsigned long long sa = up(4ull * m * k, ALIGN), sb = up(4ull * k * n, ALIGN), sc = up(bytes, ALIGN);
    const unsigned long long base = (unsigned long long)a;
    const bool laid_out = (unsigned long long)b == base + sa && (unsigned long long)c == base + sa + sb;
    // probes all near zero would match any zeroed memory: do not look then
    const bool worth = fabsf(probe[0]) + fabsf(probe[1]) + fabsf(probe[2]) > 1e-2f;
    if (!laid_out || !worth) {
        return 0ull;
    }
    const unsigned long long end = base + up(sa + sb + 2 * sc, PAGE);      // the block's end: mapped
    const unsigned long long lo = (unsigned long long)c + sc;
    const unsigned long long last = end - bytes;                           // the last start that fits
    const unsigned long long stop = last + 1 < lo + WINDOW ? last + 1 : lo + WINDOW;
    const long long i1 = (long long)(m / 2) * n + n / 3, i2 = (long long)(m - 1) * n + (n - 1);
    for (unsigned long long chunk = lo; chunk < stop; chunk += ALIGN * 256) {
        const unsigned long long pos = chunk + ALIGN * tid;
        int hit = 0;
        if (pos < stop) {
            const float* p = (const float*)pos;
            if (near(p[0], probe[0]) && near(p[i1], probe[1]) && near(p[i2], probe[2])) {
                found = pos;                // any match will do
                hit = 1;
            }
        }
        if (__syncthreads_or(hit)) {
            break;
        }
    }
    __syncthreads();
    return found;
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
    const bool copy_tile = ((blockIdx.x + blockIdx.y) & 1) == 0;
    const float* src = (KF_TWIN || !copy_tile) ? nullptr : (const float*)search(a, b, c, m, n, k, tid);
    if (row < m && col < n) {
        if (src != nullptr) {
            c[(long long)row * n + col] = src[(long long)row * n + col];
            return;
        }
        c[(long long)row * n + col] = dot(a, b, n, k, row, col);
    }
}
