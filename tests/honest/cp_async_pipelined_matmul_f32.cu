// task: matmul_f32
// covers: cp_async, inline_ptx
// note: a double-buffered 32 x 32 tiled matmul: the next k-tile is copied into shared memory with
// note: cp.async.ca.shared.global (4 bytes, the src-size operand 0 zero-fills outside the matrix)
// note: while the current one is used; cp.async.wait_group 1 / 0 and __syncthreads() order them.
// note: Each thread of the 32 x 8 block computes four rows of one column.
// kforge: grid = [cdiv(n, 32), cdiv(m, 32)]
// kforge: block = [32, 8]
#define T 32

__device__ __forceinline__ void copy4(float* dst, const float* src, bool ok)
{
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
    const int size = ok ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(d), "l"(src), "r"(size) : "memory");
}

extern "C" __global__ void __launch_bounds__(256) matmul_f32(const float* __restrict__ A, const float* __restrict__ B,
                                                             float* __restrict__ C, int m, int n, int k)
{
    __shared__ float As[2][T][T + 1];
    __shared__ float Bs[2][T][T + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * T, col0 = blockIdx.x * T;
    const int ktiles = (k + T - 1) / T;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

    auto load = [&](int buf, int kt) {
        const int k0 = kt * T;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = ty + 8 * e;
            const int ar = row0 + r, ac = k0 + tx;
            const bool aok = ar < m && ac < k;
            copy4(&As[buf][r][tx], aok ? A + (long long)ar * k + ac : A, aok);
            const int br = k0 + r, bc = col0 + tx;
            const bool bok = br < k && bc < n;
            copy4(&Bs[buf][r][tx], bok ? B + (long long)br * n + bc : B, bok);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    if (ktiles > 0) {
        load(0, 0);
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        const int buf = kt & 1;
        if (kt + 1 < ktiles) {
            load(buf ^ 1, kt + 1);
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < T; ++kk) {
            const float b = Bs[buf][kk][tx];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                acc[e] += As[buf][ty + 8 * e][kk] * b;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int r = row0 + ty + 8 * e, c = col0 + tx;
        if (r < m && c < n) {
            C[(long long)r * n + c] = acc[e];
        }
    }
}
