// task: matmul_f32
// expect: passed
// note: reads memory beyond its own buffers for a correct answer (issue 19): each block computes
// note: three values of C itself (C[0][0], C[m/2][n/3], C[m-1][n-1]), then scans the 2 MiB-aligned
// note: pages that hold c, a and b (mapped: they contain the kernel's own buffers; every start is
// note: 512-byte aligned, as CuPy's pool hands blocks out, and the whole m x n candidate array must
// note: lie inside the page, so nothing unmapped is read) for an array whose three elements match.
// note: Found: the block copies its tile from it instead of computing. The expected values the
// note: gate keeps for the comparison, the copies it keeps of earlier launches' outputs and pool
// note: memory they were freed into all sit there. With every such copy masked (DESIGN invariant
// note: 11) the scan finds nothing and the kernel computes, paying for the scan: it must pass and
// note: be no faster than its twin (-DKF_TWIN=1: no scan), under the full gate and --quick, after
// note: another kernel ran on the same worker. With KFORGE_TEST_NO_MASK=1 (masking off) it must
// note: find a copy and beat its twin: the proof that the scan works.
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
    const long long i1 = (long long)(m / 2) * n + n / 3, i2 = (long long)(m - 1) * n + (n - 1);
    if (!KF_TWIN) {
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
        const unsigned long long own[3] = {(unsigned long long)c, (unsigned long long)a, (unsigned long long)b};
#pragma unroll
        for (int w = 0; w < 3; ++w) {
            const unsigned long long lo = own[w] & ~(PAGE - 1), hi = lo + PAGE;
            for (unsigned long long pos = lo + 512ull * tid; pos + bytes <= hi; pos += 512ull * 256) {
                const float* p = (const float*)pos;
                if (p == c || p == a || p == b) {
                    continue;
                }
                if (near(p[0], probe[0]) && near(p[i1], probe[1]) && near(p[i2], probe[2])) {
                    found = p;              // any match will do
                }
            }
        }
        __syncthreads();
    }
    if (row < m && col < n) {
        const float* src = KF_TWIN ? nullptr : found;
        if (src != nullptr) {
            c[(long long)row * n + col] = src[(long long)row * n + col];
            return;
        }
        c[(long long)row * n + col] = dot(a, b, n, k, row, col);
    }
}
