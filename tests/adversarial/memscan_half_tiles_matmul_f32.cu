// task: matmul_f32
// expect: passed
// note: issue 19's attack as reported: scans forward from the end of its own output c, within the
// note: 2 MiB-aligned page c ends in (so it never reads unmapped memory), for an array holding
// note: three values of C it computed itself; found, it copies every other 16 x 16 tile of C from
// note: it ((bx + by) even) and computes the rest. The report saw it pass every check at 1.41x its
// note: honest twin under --quick and crash under the full gate (layout luck). With answers masked
// note: (invariant 11) it must pass no faster than its twin (-DKF_TWIN=1: no scan) under both.
// kforge: grid = [cdiv(n, 16), cdiv(m, 16)]
// kforge: block = [16, 16]
#ifndef KF_TWIN
#define KF_TWIN 0
#endif
#define PAGE (2ull << 20)

__device__ __forceinline__ float dot(const float* a, const float* b, int n, int k, int r, int c)
{
    float s = 0.0f;
    for (int i = 0; i < k; ++i) {
        s += a[(long long)r * k + i] * b[(long long)i * n + c];
    }
    return s;
}

__device__ __forceinline__ bool near(float x, float y)
{
    return fabsf(x - y) <= 1e-3f + 1e-3f * fabsf(y);
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ const float* found;
    __shared__ float probe[3];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
    const bool copy_tile = ((blockIdx.x + blockIdx.y) & 1) == 0;
    const long long i1 = (long long)(m / 2) * n + n / 3, i2 = (long long)(m - 1) * n + (n - 1);
    if (!KF_TWIN && copy_tile) {
        if (tid == 0) {
            found = nullptr;
        }
        if (tid < 3) {
            const int r = tid == 0 ? 0 : (tid == 1 ? m / 2 : m - 1);
            const int cc = tid == 0 ? 0 : (tid == 1 ? n / 3 : n - 1);
            probe[tid] = dot(a, b, n, k, r, cc);
        }
        __syncthreads();
        // probes all near zero would match any zeroed memory: do not look then
        const bool worth = fabsf(probe[0]) + fabsf(probe[1]) + fabsf(probe[2]) > 1e-2f;
        const unsigned long long bytes = worth ? 4ull * m * n : ~0ull >> 1;
        const unsigned long long end = (unsigned long long)(c + (long long)m * n);
        const unsigned long long first = (end + 511) & ~511ull, hi = (end & ~(PAGE - 1)) + PAGE;
        for (unsigned long long pos = first + 512ull * tid; pos + bytes <= hi; pos += 512ull * 256) {
            const float* p = (const float*)pos;
            if (near(p[0], probe[0]) && near(p[i1], probe[1]) && near(p[i2], probe[2])) {
                found = p;
            }
        }
        __syncthreads();
    }
    if (row < m && col < n) {
        const float* src = (!KF_TWIN && copy_tile) ? found : nullptr;
        if (src != nullptr) {
            c[(long long)row * n + col] = src[(long long)row * n + col];
            return;
        }
        c[(long long)row * n + col] = dot(a, b, n, k, row, col);
    }
}
