// kforge/online_softmax.cuh -- the online-softmax rule the bound softmaxes (row_softmax/row_softmax,
// row_softmax/softmax_axis) combine partial (max, sum of exp) pairs with.  NVRTC gets it in memory
// by this name (kernel_forge/kernels/library.py).
#define KF_NEG_INF __int_as_float(0xff800000)

// (m, s) <- the pair of the values behind (m, s) and (om, os): the larger max, each sum rescaled to
// it; an empty side (max -inf) adds nothing, so no exp(-inf - -inf) makes a NaN
__device__ __forceinline__ void kf_combine(float& m, float& s, float om, float os)
{
    const float nm = fmaxf(m, om);
    const float a = (m == KF_NEG_INF) ? 0.0f : s * expf(m - nm);
    const float b = (om == KF_NEG_INF) ? 0.0f : os * expf(om - nm);
    m = nm;
    s = a + b;
}
