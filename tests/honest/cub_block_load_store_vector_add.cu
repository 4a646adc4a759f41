// task: vector_add
// covers: cub, launch_bounds
// note: cub::BlockLoad / cub::BlockStore with the warp-transpose algorithm (shared temporary
// note: storage in a union, __syncthreads() between reuses), 4 items per thread; the last tile is
// note: loaded and stored guarded by the number of valid items.
// kforge: grid = [cdiv(n, 512)]
// kforge: block = [128]
#include <cub/block/block_load.cuh>
#include <cub/block/block_store.cuh>

#define BLOCK 128
#define ITEMS 4

extern "C" __global__ void __launch_bounds__(BLOCK) vector_add(const float* a, const float* b, float* c, int n)
{
    typedef cub::BlockLoad<float, BLOCK, ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE> Load;
    typedef cub::BlockStore<float, BLOCK, ITEMS, cub::BLOCK_STORE_WARP_TRANSPOSE> Store;
    union Temp {
        Load::TempStorage load;
        Store::TempStorage store;
    };
    __shared__ Temp temp;
    const long long base = (long long)blockIdx.x * BLOCK * ITEMS;
    const long long left = (long long)n - base;
    const int valid = left < BLOCK * ITEMS ? (int)left : BLOCK * ITEMS;
    float va[ITEMS], vb[ITEMS], vc[ITEMS];
    Load(temp.load).Load(a + base, va, valid, 0.0f);
    __syncthreads();
    Load(temp.load).Load(b + base, vb, valid, 0.0f);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        vc[i] = va[i] + vb[i];
    }
    Store(temp.store).Store(c + base, vc, valid);
}
