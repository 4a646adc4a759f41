// task: matmul_f32
// expect: mismatch
// note: shared-memory tiled 16x16 matmul that assumes k is a multiple of 16: it runs k / 16 full
// note: tiles and has no bounds-checked partial last tile. Loads and stores are guarded in m and n,
// note: so nothing outside the buffers is touched (a silent out-of-bounds write could instead hit
// note: another buffer and show up as input_modified). The performance shapes (k = 256, 320,
// note: 4096) are multiples of 16 and come out right; case "odd" (31x37x29) drops the last 13
// note: terms of every dot product: every element is written, most are wrong -> mismatch.
#define TILE 16

extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * TILE + tx;
    int row = blockIdx.y * TILE + ty;
    float acc = 0.0f;
    int tiles = k / TILE;  // BUG: the k % TILE trailing terms are never visited
    for (int t = 0; t < tiles; ++t) {
        int ka = t * TILE + tx;
        int kb = t * TILE + ty;
        as[ty][tx] = row < m ? a[(size_t)row * k + ka] : 0.0f;
        bs[ty][tx] = col < n ? b[(size_t)kb * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int p = 0; p < TILE; ++p) {
            acc += as[ty][p] * bs[p][tx];
        }
        __syncthreads();
    }
    if (row < m && col < n) {
        c[(size_t)row * n + col] = acc;
    }
}
