// kforge/tf32_mma.cuh -- the TF32 tensor-core pieces of the split-precision GEMMs (sm_80+): TF32
// rounding, mma.sync.m16n8k8, the hi/lo split and the three-product step.  One copy for the
// library's kernels that use them (gemm/gemm_tf32x3_mma, gemm/gemm_tf32x3); NVRTC gets it in memory
// by this name (kernel_forge/kernels/library.py).  The tests' host emulation defines
// KF_EMULATED_PTX and supplies the two PTX wrappers; the split and the step are shared with it.
#ifndef KF_EMULATED_PTX
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
#endif

// x = hi + lo with both parts TF32: hi carries the top 11 significant bits, lo the next 11
__device__ __forceinline__ void kf_split(float x, unsigned& hi, unsigned& lo)
{
    hi = kf_tf32(x);
    lo = kf_tf32(x - __uint_as_float(hi));
}

// d += a*b for one 8-deep slice at fp32-level error: a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (a_lo*b_lo,
// ~2^-22 relative, dropped), the small products first.  The three products go into a fresh
// accumulator that is then added to d by an fp32 add (round to nearest): the tensor core aligns
// and cuts its sum to the largest term, so letting it add the slice into the running total
// directly, slice after slice, lets its truncation pile up in one direction: 2.1x of matmul_f32's
// tolerance at k = 4096 on an H100 and an H200, against 0.06x this way (H100).
__device__ __forceinline__ void kf_mma_tf32x3(float* d, const unsigned* ahi, const unsigned* alo,
                                              const unsigned* bhi, const unsigned* blo)
{
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    kf_mma_tf32(s, alo, bhi);
    kf_mma_tf32(s, ahi, blo);
    kf_mma_tf32(s, ahi, bhi);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        d[r] += s[r];
    }
}
