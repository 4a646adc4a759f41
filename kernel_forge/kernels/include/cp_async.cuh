// kforge/cp_async.cuh -- cp.async wrappers (sm_80+): 16- and 4-byte copies global -> shared, commit
// and wait.  One copy for the library's pipelined GEMMs (gemm/gemm_tf32x3_mma, gemm/gemm_tf32x3,
// gemm/gemm_f16_mma); NVRTC gets it in memory by this name (kernel_forge/kernels/library.py).
// 16 bytes global -> shared, asynchronously; src_bytes < 16 fills the rest with zeros
__device__ __forceinline__ void kf_cp_async16(void* smem, const void* gmem, int src_bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(src_bytes));
}

// 4 bytes global -> shared, asynchronously; src_bytes = 0 writes a zero
__device__ __forceinline__ void kf_cp_async4(void* smem, const void* gmem, int src_bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(s), "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void kf_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// wait until at most N of this thread's committed groups are still in flight
template <int N>
__device__ __forceinline__ void kf_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
