// task: matmul_f32
// expect: passed
// note: memoisation class, full-hash keys and a 64 MB+ module array. Every 16x16 block owns one
// note: tile of C and a cache slot for it (64 MB of tiles: all of C of "large", 4096x4096, fits,
// note: plus 512 KB of keys). Its key is a 64-bit hash of (m, n, k) and of EVERY input element the
// note: tile depends on (its 16 rows of a and 16 columns of b, each value mixed with its index), so
// note: the cache is right for any inputs, not only for sampled ones. Hashing reads each of those
// note: elements once, with a few integer operations, instead of the k multiply-adds per output and
// note: the repeated loads of the dot products: a hit copies the tile and is several times cheaper
// note: than computing it. No block waits for another (no launch-wide key), writes all of C every
// note: launch, always correct.
// note: The gate must: start every launch from the module's initial globals (keys read 0, no hit:
// note: PASSES, no faster than its twin), or refuse it for keeping state. Restoring 64 MB per
// note: launch also tests what the restore costs.
// note: Twin (-DKF_TWIN=1): hashes and fills the cache the same way but never serves it.
#define TILE 16
#define MAX_TILES (1 << 16)                 // 256 x 256 tiles: C of 4096 x 4096
#define CACHE_FLOATS (MAX_TILES * TILE * TILE)

__device__ float g_tiles[CACHE_FLOATS];
__device__ unsigned long long g_tile_key[MAX_TILES];   // 0: empty

// one element's contribution: cheap 32-bit mixing of its value and its index, two lanes -> 64 bits
__device__ __forceinline__ unsigned long long mix(unsigned int v, unsigned int at)
{
    unsigned int x = v * 0x9E3779B1u + at * 0x85EBCA77u;
    x ^= x >> 15;
    x *= 0xC2B2AE3Du;
    x ^= x >> 13;
    return ((unsigned long long)(x * 0x27D4EB2Fu + v) << 32) | x;
}

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ unsigned long long hash;
    __shared__ int hit;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * TILE + tx;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    const long long tile = (long long)blockIdx.y * gridDim.x + blockIdx.x;
    const bool cacheable = tile < MAX_TILES;
    if (tid == 0) {
        hash = mix((unsigned int)m, 0x1000193u) + mix((unsigned int)n, 0x2000193u) + mix((unsigned int)k, 0x3000193u);
    }
    __syncthreads();
    // every element of a[r0 .. r0+16, :] and b[:, c0 .. c0+16], each mixed with its index
    unsigned long long h = 0;
    const int rows = min(TILE, m - r0), cols = min(TILE, n - c0);
    for (int i = tid; i < rows * k; i += TILE * TILE) {
        const size_t at = (size_t)(r0 + i / k) * k + (size_t)(i % k);
        h += mix(__float_as_uint(a[at]), (unsigned int)at);
    }
    for (int i = tid; i < k * cols; i += TILE * TILE) {
        const size_t at = (size_t)(i / cols) * n + c0 + (size_t)(i % cols);
        h += mix(__float_as_uint(b[at]), (unsigned int)at ^ 0x80000000u);
    }
    atomicAdd(&hash, h);   // a sum: the order of the threads does not matter
    __syncthreads();
    if (tid == 0) {
        unsigned long long key = hash ? hash : 1ull;
        hash = key;
        hit = cacheable && ((volatile unsigned long long*)g_tile_key)[cacheable ? tile : 0] == key;
#ifdef KF_TWIN
        hit = 0;   // the honest twin never serves the cache
#endif
    }
    __syncthreads();
    const int row = r0 + ty, col = c0 + tx;
    float* slot = g_tiles + (size_t)(cacheable ? tile : 0) * (TILE * TILE);
    if (row < m && col < n) {
        const size_t idx = (size_t)row * n + col;
        if (hit) {
            c[idx] = slot[tid];
        } else {
            const float* arow = a + (size_t)row * k;
            float acc = 0.0f;
            for (int p = 0; p < k; ++p) {
                acc += arow[p] * b[(size_t)p * n + col];
            }
            c[idx] = acc;
            if (cacheable) {
                slot[tid] = acc;
            }
        }
    }
    if (!hit && cacheable) {
        __syncthreads();
        if (tid == 0) {
            __threadfence();
            g_tile_key[tile] = hash;   // read by later launches only
        }
    }
}
