// kforge/tf32_mma.cuh -- the TF32 tensor-core wrappers of the split-precision GEMMs (sm_80+): TF32
// rounding and mma.sync.m16n8k8.  One copy for the library's kernels that use them
// (gemm/gemm_tf32x3_mma, gemm/gemm_tf32x3); NVRTC gets it in memory by this name
// (kernel_forge/kernels/library.py).
// x rounded to TF32 (10-bit mantissa, round to nearest, ties away from zero): an fp32 bit pattern
// with the low 13 bits zero
__device__ __forceinline__ unsigned kf_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// d += a (16 x 8, row) * b (8 x 8, col), fp32 accumulate.  With g = lane / 4, t = lane % 4:
//   a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4], a[3] = A[g+8][t+4]
//   b[0] = B[t][g], b[1] = B[t+4][g]
//   d[0] = D[g][2t], d[1] = D[g][2t+1], d[2] = D[g+8][2t], d[3] = D[g+8][2t+1]
__device__ __forceinline__ void kf_mma_tf32(float* d, const unsigned* a, const unsigned* b)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
