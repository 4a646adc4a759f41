// kforge/arg_pair.cuh -- the (value, index) order of the bound argmax / argmin patterns
// (row_reduction/row_argmax, row_reduction/argmax_axis): NumPy's and PyTorch's answer, so that the
// order pairs are combined in cannot change it.  KF_ARGMIN: the smallest value.  NVRTC gets it in
// memory by this name (kernel_forge/kernels/library.py).
#ifndef KF_ARGMIN
#define KF_ARGMIN 0
#endif

// whether (a, ia) comes before (b, ib): a NaN first (the first NaN), then the larger (smaller) value,
// then the smaller column
__device__ __forceinline__ bool kf_before(float a, int ia, float b, int ib)
{
    const bool an = a != a, bn = b != b;
    if (an || bn) {
        return an && (!bn || ia < ib);
    }
    if (a == b) {
        return ia < ib;
    }
    return KF_ARGMIN ? a < b : a > b;
}

__device__ __forceinline__ void kf_take(float& v, int& i, float a, int ia)
{
    if (kf_before(a, ia, v, i)) {
        v = a;
        i = ia;
    }
}
