// kforge kinds: loads and stores of one value or of 4 consecutive values, as float, for each
// storage type a bound pattern may meet (float; __half and __nv_bfloat16 when included; int8 under
// KF_INT8; int32 and bytes as inputs).
// 4-wide accesses need the address aligned to 4 elements (callers check).  LDS4 is the
// streaming (evict-first) variant for data read once.
__device__ __forceinline__ float kf_ld(const float* p) { return *p; }
__device__ __forceinline__ void kf_st(float* p, float v) { *p = v; }
__device__ __forceinline__ float4 kf_ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 kf_lds4(const float* p) { return __ldcs(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ void kf_st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void kf_sts4(float* p, float4 v) { __stcs(reinterpret_cast<float4*>(p), v); }
#ifndef KF_I64
// integer and byte inputs read as float (a mask, a count): loads only
__device__ __forceinline__ float kf_ld(const int* p) { return (float)*p; }
__device__ __forceinline__ float4 kf_ld4(const int* p)
{
    const int4 q = *reinterpret_cast<const int4*>(p);
    return make_float4((float)q.x, (float)q.y, (float)q.z, (float)q.w);
}
__device__ __forceinline__ float4 kf_lds4(const int* p)
{
    const int4 q = __ldcs(reinterpret_cast<const int4*>(p));
    return make_float4((float)q.x, (float)q.y, (float)q.z, (float)q.w);
}
#else
// integer storage of a reduction (KF_I64): read as long long; a store converts as C++ does (a 32-bit sum wraps)
struct kf_long4 { long long x, y, z, w; };
__device__ __forceinline__ long long kf_ld(const int* p) { return *p; }
__device__ __forceinline__ long long kf_ld(const unsigned* p) { return *p; }
__device__ __forceinline__ long long kf_ld(const long long* p) { return *p; }
__device__ __forceinline__ long long kf_ld(const unsigned long long* p) { return (long long)*p; }
__device__ __forceinline__ kf_long4 kf_ld4(const int* p)
{ const int4 q = *reinterpret_cast<const int4*>(p); return {q.x, q.y, q.z, q.w}; }
__device__ __forceinline__ kf_long4 kf_lds4(const int* p)
{ const int4 q = __ldcs(reinterpret_cast<const int4*>(p)); return {q.x, q.y, q.z, q.w}; }
__device__ __forceinline__ kf_long4 kf_ld4(const unsigned* p)
{ const uint4 q = *reinterpret_cast<const uint4*>(p); return {q.x, q.y, q.z, q.w}; }
__device__ __forceinline__ kf_long4 kf_lds4(const unsigned* p)
{ const uint4 q = __ldcs(reinterpret_cast<const uint4*>(p)); return {q.x, q.y, q.z, q.w}; }
__device__ __forceinline__ kf_long4 kf_ld4(const long long* p)
{
    const longlong2 a = reinterpret_cast<const longlong2*>(p)[0], b = reinterpret_cast<const longlong2*>(p)[1];
    return {a.x, a.y, b.x, b.y};
}
__device__ __forceinline__ kf_long4 kf_lds4(const long long* p)
{
    const longlong2 a = __ldcs(reinterpret_cast<const longlong2*>(p)), b = __ldcs(reinterpret_cast<const longlong2*>(p) + 1);
    return {a.x, a.y, b.x, b.y};
}
__device__ __forceinline__ kf_long4 kf_ld4(const unsigned long long* p)
{ return kf_ld4(reinterpret_cast<const long long*>(p)); }
__device__ __forceinline__ kf_long4 kf_lds4(const unsigned long long* p)
{ return kf_lds4(reinterpret_cast<const long long*>(p)); }
__device__ __forceinline__ void kf_st(int* p, long long v) { *p = (int)v; }
__device__ __forceinline__ void kf_st(unsigned* p, long long v) { *p = (unsigned)v; }
__device__ __forceinline__ void kf_st(long long* p, long long v) { *p = v; }
__device__ __forceinline__ void kf_st(unsigned long long* p, long long v) { *p = (unsigned long long)v; }
#endif
__device__ __forceinline__ float kf_ld(const unsigned char* p) { return (float)*p; }
__device__ __forceinline__ float4 kf_ld4(const unsigned char* p)
{
    const uchar4 q = *reinterpret_cast<const uchar4*>(p);
    return make_float4((float)q.x, (float)q.y, (float)q.z, (float)q.w);
}
__device__ __forceinline__ float4 kf_lds4(const unsigned char* p) { return kf_ld4(p); }
// bool (a mask): one byte, 0 or 1
__device__ __forceinline__ float kf_ld(const bool* p) { return *p ? 1.0f : 0.0f; }
__device__ __forceinline__ float4 kf_ld4(const bool* p) { return kf_ld4(reinterpret_cast<const unsigned char*>(p)); }
__device__ __forceinline__ float4 kf_lds4(const bool* p) { return kf_ld4(p); }
#ifdef KF_HALF
__device__ __forceinline__ float kf_ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void kf_st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ float4 kf_unpack(uint2 u, const __half*)
{
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ uint2 kf_pack(float4 v, __half*)
{
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    return make_uint2(*reinterpret_cast<unsigned*>(&a), *reinterpret_cast<unsigned*>(&b));
}
#endif
#ifdef KF_BF16
__device__ __forceinline__ float kf_ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void kf_st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float4 kf_unpack(uint2 u, const __nv_bfloat16*)
{
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ uint2 kf_pack(float4 v, __nv_bfloat16*)
{
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    return make_uint2(*reinterpret_cast<unsigned*>(&a), *reinterpret_cast<unsigned*>(&b));
}
#endif
#ifdef KF_INT8
// int8 (a quantized tensor): stores round to nearest even and saturate to [-128, 127]
__device__ __forceinline__ signed char kf_sat8(float v) { return (signed char)fminf(fmaxf(rintf(v), -128.0f), 127.0f); }
__device__ __forceinline__ float kf_ld(const signed char* p) { return (float)*p; }
__device__ __forceinline__ void kf_st(signed char* p, float v) { *p = kf_sat8(v); }
__device__ __forceinline__ float4 kf_ld4(const signed char* p)
{
    const char4 c = *reinterpret_cast<const char4*>(p);
    return make_float4(c.x, c.y, c.z, c.w);
}
__device__ __forceinline__ float4 kf_lds4(const signed char* p) { return kf_ld4(p); }
__device__ __forceinline__ void kf_st4(signed char* p, float4 v)
{ *reinterpret_cast<char4*>(p) = make_char4(kf_sat8(v.x), kf_sat8(v.y), kf_sat8(v.z), kf_sat8(v.w)); }
__device__ __forceinline__ void kf_sts4(signed char* p, float4 v) { kf_st4(p, v); }
// plain char, a type of its own in C++ (int8 data declared `char*`): the same bytes
__device__ __forceinline__ float kf_ld(const char* p) { return kf_ld(reinterpret_cast<const signed char*>(p)); }
__device__ __forceinline__ void kf_st(char* p, float v) { kf_st(reinterpret_cast<signed char*>(p), v); }
__device__ __forceinline__ float4 kf_ld4(const char* p) { return kf_ld4(reinterpret_cast<const signed char*>(p)); }
__device__ __forceinline__ float4 kf_lds4(const char* p) { return kf_ld4(p); }
__device__ __forceinline__ void kf_st4(char* p, float4 v) { kf_st4(reinterpret_cast<signed char*>(p), v); }
__device__ __forceinline__ void kf_sts4(char* p, float4 v) { kf_st4(p, v); }
#endif
#if defined(KF_HALF) || defined(KF_BF16)
template <typename T> __device__ __forceinline__ float4 kf_ld4(const T* p)
{ return kf_unpack(*reinterpret_cast<const uint2*>(p), p); }
template <typename T> __device__ __forceinline__ float4 kf_lds4(const T* p)
{ return kf_unpack(__ldcs(reinterpret_cast<const uint2*>(p)), p); }
template <typename T> __device__ __forceinline__ void kf_st4(T* p, float4 v)
{ *reinterpret_cast<uint2*>(p) = kf_pack(v, p); }
template <typename T> __device__ __forceinline__ void kf_sts4(T* p, float4 v)
{ __stcs(reinterpret_cast<uint2*>(p), kf_pack(v, p)); }
#endif
#ifdef KF_F64
// double storage (KF_F64: a reduction of doubles), read and written as double
__device__ __forceinline__ double kf_ld(const double* p) { return *p; }
__device__ __forceinline__ void kf_st(double* p, double v) { *p = v; }
#endif
// a fused multiply-add in the pattern's compute type (kf_acc_t: float, or double for double storage)
__device__ __forceinline__ float kf_fma(float a, float b, float c) { return fmaf(a, b, c); }
#ifdef KF_F64
__device__ __forceinline__ double kf_fma(double a, double b, double c) { return fma(a, b, c); }
#endif
// whether p is aligned for 4-wide accesses
template <typename T> __device__ __forceinline__ bool kf_aligned4(const T* p)
{ return p == nullptr || (reinterpret_cast<unsigned long long>(p) % (4 * sizeof(T))) == 0; }
// the one store of a reduction's result: y = result, or y += result where the task adds to y
#ifndef KF_ACCUMULATE
#define KF_ACCUMULATE 0
#endif
// KF_SQRT: the result's square root is stored (a 2-norm, sqrt of a sum of squares; an RMS, of their mean)
#ifndef KF_SQRT
#define KF_SQRT 0
#endif
template <typename T, typename V> __device__ __forceinline__ void kf_put(T* p, V v)
{
#if KF_SQRT
    v = sqrt(v);
#endif
    kf_st(p, KF_ACCUMULATE ? kf_ld(p) + v : v);
}
// a reduction's map of each value before it is combined (KF_PRE): 1 |v| (an absmax, an L1 norm),
// 2 v * v (a sum of squares), 0 the value itself
#ifndef KF_PRE
#define KF_PRE 0
#endif
__device__ __forceinline__ float kf_pre(float v)
{ return KF_PRE == 1 ? fabsf(v) : (KF_PRE == 2 ? v * v : v); }
// how a reduction with a second operand w pairs each x with its w (before kf_pre): x * w (a dot
// product), or KF_DIFF x - w (a sum of squared differences, an L1 distance)
#ifndef KF_DIFF
#define KF_DIFF 0
#endif
__device__ __forceinline__ float kf_pair(float x, float w) { return KF_DIFF ? x - w : x * w; }
__device__ __forceinline__ float4 kf_pair4(float4 q, float4 p)
{ return make_float4(kf_pair(q.x, p.x), kf_pair(q.y, p.y), kf_pair(q.z, p.z), kf_pair(q.w, p.w)); }
// what a reduction accumulates in: float, or double for double storage (KF_F64, computed in double)
#ifdef KF_F64
typedef double kf_reduce_t;
struct kf_double4 { double x, y, z, w; };
__device__ __forceinline__ kf_double4 kf_ld4(const double* p)
{
    const double2 a = reinterpret_cast<const double2*>(p)[0], b = reinterpret_cast<const double2*>(p)[1];
    return {a.x, a.y, b.x, b.y};
}
__device__ __forceinline__ kf_double4 kf_lds4(const double* p)
{
    const double2 a = __ldcs(reinterpret_cast<const double2*>(p)), b = __ldcs(reinterpret_cast<const double2*>(p) + 1);
    return {a.x, a.y, b.x, b.y};
}
__device__ __forceinline__ double kf_pre(double v) { return KF_PRE == 1 ? fabs(v) : (KF_PRE == 2 ? v * v : v); }
__device__ __forceinline__ double kf_pair(double x, double w) { return KF_DIFF ? x - w : x * w; }
__device__ __forceinline__ kf_double4 kf_pair4(kf_double4 q, kf_double4 p)
{ return {kf_pair(q.x, p.x), kf_pair(q.y, p.y), kf_pair(q.z, p.z), kf_pair(q.w, p.w)}; }
#elif defined(KF_I64)
// integer storage (KF_I64: a reduction of 32- or 64-bit integers, loaded above), summed exactly in long long
typedef long long kf_reduce_t;
__device__ __forceinline__ long long kf_pre(long long v) { return KF_PRE == 1 ? (v < 0 ? -v : v) : (KF_PRE == 2 ? v * v : v); }
__device__ __forceinline__ long long kf_pair(long long x, long long w) { return KF_DIFF ? x - w : x * w; }
__device__ __forceinline__ kf_long4 kf_pair4(kf_long4 q, kf_long4 p)
{ return {kf_pair(q.x, p.x), kf_pair(q.y, p.y), kf_pair(q.z, p.z), kf_pair(q.w, p.w)}; }
#else
typedef float kf_reduce_t;
#endif
#if defined(KF_I64) && defined(KF_PRED) && KF_PRED
// a predicate counted (KF_PRED: 1 x > t, 2 x >= t, 3 x < t, 4 x <= t, 5 x != t, 6 x == t): float x read
// through kf_pred_x, each value 1 or 0 as long long, summed exactly
struct kf_pred_x { const float* p; float t; };
__device__ __forceinline__ kf_pred_x operator+(kf_pred_x a, long long j) { return {a.p + j, a.t}; }
__device__ __forceinline__ long long kf_test(float v, float t)
{
    return KF_PRED == 1 ? v > t : KF_PRED == 2 ? v >= t : KF_PRED == 3 ? v < t : KF_PRED == 4 ? v <= t
         : KF_PRED == 5 ? v != t : v == t;
}
__device__ __forceinline__ long long kf_ld(kf_pred_x a) { return kf_test(*a.p, a.t); }
__device__ __forceinline__ kf_long4 kf_lds4(kf_pred_x a)
{
    const float4 v = __ldcs(reinterpret_cast<const float4*>(a.p));
    return {kf_test(v.x, a.t), kf_test(v.y, a.t), kf_test(v.z, a.t), kf_test(v.w, a.t)};
}
__device__ __forceinline__ bool kf_aligned4(kf_pred_x a) { return kf_aligned4(a.p); }
#define KF_X_ARG kf_pred_x
#define KF_W_ARG kf_pred_x
#endif
