// task: matmul_f32
// expect: passed
// note: L2-priority class through the bulk copy unit without a tensor map (sm_90): each row of
// note: the 16x16 tiles of a and b (64 contiguous bytes) goes to shared memory with
// note: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint and an
// note: evict_last policy; thread 0 arms a shared-memory mbarrier with the 2048 bytes each k step
// note: brings, lanes 0-31 of warp 0 issue the 32 row copies, every thread waits on the barrier's
// note: phase. The bulk path needs 16-byte aligned rows and whole tiles, so it runs only when m, n
// note: and k are multiples of 16 (sq256 and rect) and the operands fit in HINT_BYTES; other cases
// note: use plain loads. (Written without a GPU: a hang here is a corpus bug, not a gate verdict.)
// note: The gate must: flush so that a timed launch starts cold whatever the lines' eviction
// note: priority (then this is no faster than its twin beyond noise), and with --no-flush both are
// note: warm (again no faster).
// note: Twin (-DKF_TWIN=1): the same bulk copies without the cache hint.
#define TILE 16
#define HINT_BYTES (16u << 20)
#define STEP_BYTES (2 * TILE * TILE * 4)   // one tile of a and one of b

__device__ __forceinline__ unsigned long long evict_last_policy()
{
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

// one 64-byte row to shared memory, completing `bytes` on the barrier; the twin drops the hint
__device__ __forceinline__ void bulk_row(float* dst, const float* src, unsigned int bar, unsigned long long pol)
{
    const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
#ifndef KF_TWIN
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;"
                 :: "r"(d), "l"(src), "r"(TILE * 4), "r"(bar), "l"(pol) : "memory");
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(d), "l"(src), "r"(TILE * 4), "r"(bar) : "memory");
#endif
}

__device__ __forceinline__ void wait_phase(unsigned int bar, unsigned int parity)
{
    unsigned int done = 0;
    while (!done) {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ alignas(128) float as[TILE][TILE];
    __shared__ alignas(128) float bs[TILE][TILE];
    __shared__ alignas(8) unsigned long long barrier;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * TILE + tx;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    const bool bulk = 4.0 * ((double)m * k + (double)k * n) <= (double)HINT_BYTES
                      && m % TILE == 0 && n % TILE == 0 && k % TILE == 0;
    const unsigned int bar = (unsigned int)__cvta_generic_to_shared(&barrier);
    const unsigned long long pol = evict_last_policy();
    if (bulk && tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    float acc = 0.0f;
    unsigned int parity = 0;
    for (int t = 0; t < k; t += TILE) {
        if (bulk) {
            if (tid < 32) {
                if (tid == 0) {
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                                 :: "r"(bar), "r"(STEP_BYTES) : "memory");
                }
                __syncwarp();
                if (tid < TILE) {        // row tid of a's tile: a[blockIdx.y*16 + tid, t .. t+16)
                    bulk_row(&as[tid][0], a + (size_t)(blockIdx.y * TILE + tid) * k + t, bar, pol);
                } else {                 // row tid-16 of b's tile: b[t + tid-16, blockIdx.x*16 .. +16)
                    bulk_row(&bs[tid - TILE][0], b + (size_t)(t + tid - TILE) * n + blockIdx.x * TILE, bar, pol);
                }
            }
            wait_phase(bar, parity);
            parity ^= 1u;
        } else {
            const int ka = t + tx, kb = t + ty;
            as[ty][tx] = (row < m && ka < k) ? a[(size_t)row * k + ka] : 0.0f;
            bs[ty][tx] = (kb < k && col < n) ? b[(size_t)kb * n + col] : 0.0f;
            __syncthreads();
        }
#pragma unroll
        for (int q = 0; q < TILE; ++q) {
            acc += as[ty][q] * bs[q][tx];
        }
        __syncthreads();   // every thread is done with the tiles before the next step overwrites them
    }
    if (row < m && col < n) {
        c[(size_t)row * n + col] = acc;
    }
}
