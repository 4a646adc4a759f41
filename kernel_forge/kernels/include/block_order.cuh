// kforge/block_order.cuh -- the grouped block order of the library's pipelined GEMMs
// (gemm/gemm_tf32x3_mma, gemm/gemm_tf32x3, gemm/gemm_f16_mma, gemm/gemm_f16): the blocks are taken
// GROUP block-rows at a time, walked column by column, so that the blocks resident together share
// panels of A and of B in L2.  NVRTC gets it in memory by this name (kernel_forge/kernels/library.py).
// by, bx: this block's tile row and column in the gridDim.y x gridDim.x grid of output tiles.
__device__ __forceinline__ void kf_grouped_block(int group, int& by, int& bx)
{
    const int gx = gridDim.x, gy = gridDim.y;
    const int lin = blockIdx.y * gx + blockIdx.x;
    const int group_size = group * gx;
    const int first_row = (lin / group_size) * group;
    const int rows_here = min(group, gy - first_row);
    by = first_row + (lin % group_size) % rows_here;
    bx = (lin % group_size) / rows_here;
}
