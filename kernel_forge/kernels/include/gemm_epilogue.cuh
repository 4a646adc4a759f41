// kforge/gemm_epilogue.cuh -- the bound GEMMs' epilogue (kf_epi_value: every bound gemm; kf_epi, which
// stores it: gemm/gemm_f16, gemm/gemm_f16_wg, gemm/gemm_tf32x3_wg), for a kernel written by the binder: kf_c_t, kf_bias_t, KF_HAS_BETA,
// KF_HAS_BIAS and the kinds' IO header (kf_ld, kf_st) come before it.  NVRTC gets it in memory by
// this name (kernel_forge/kernels/library.py); the binder writes its text in place.
#ifndef KF_GEMM_ACT
#define KF_GEMM_ACT 0
#endif
// C[col] of the row crow: alpha * acc (+ beta * C) (+ bias[col]), then (KF_GEMM_ACT) the fused
// activation kf_gemm_act the binder writes (a linear layer's relu(x @ W + b)), in float
template <typename C, typename B>
__device__ __forceinline__ float kf_epi_value(float acc, const C* __restrict__ crow, int col, float alpha, float beta,
                                              const B* __restrict__ bias)
{
    float v = alpha * acc;
#if KF_HAS_BETA
    v = fmaf(beta, kf_ld(crow + col), v);
#endif
#if KF_HAS_BIAS
    v += kf_ld(bias + col);
#endif
#if KF_GEMM_ACT
    v = kf_gemm_act(v);
#endif
    return v;
}
// ... stored as C's type, rounded once
__device__ __forceinline__ void kf_epi(float acc, kf_c_t* __restrict__ crow, int col, float alpha, float beta,
                                       const kf_bias_t* __restrict__ bias)
{
    kf_st(crow + col, kf_epi_value(acc, crow, col, alpha, beta, bias));
}
