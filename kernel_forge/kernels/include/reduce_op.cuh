// kforge kinds: a reduction's combine and its identity (KF_OP_MAX, KF_OP_MIN, else a sum), in
// kf_reduce_t: float, double (KF_F64) or long long (KF_I64: integers summed exactly, wrapping as the
// output's type wraps when stored).
template <typename V> __device__ __forceinline__ V kf_combine_op(V a, V b)
{
#if KF_OP_MAX
    return fmax(a, b);
#elif KF_OP_MIN
    return fmin(a, b);
#else
    return a + b;
#endif
}
#ifdef KF_I64
__device__ __forceinline__ long long kf_combine_op(long long a, long long b)
{
#if KF_OP_MAX
    return a > b ? a : b;
#elif KF_OP_MIN
    return a < b ? a : b;
#else
    return a + b;
#endif
}
#endif
__device__ __forceinline__ kf_reduce_t kf_reduce_init()
{
#ifdef KF_I64
    return KF_OP_MAX ? (-9223372036854775807LL - 1) : (KF_OP_MIN ? 9223372036854775807LL : 0LL);
#else
    const kf_reduce_t inf = __int_as_float(0x7f800000);
    return KF_OP_MAX ? -inf : (KF_OP_MIN ? inf : (kf_reduce_t)0);
#endif
}
