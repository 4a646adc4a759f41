// kforge kinds: what the rotary embeddings' bound patterns (rope, rope_tokens) share: the pairs a
// thread's group holds (KF_G: 2 interleaved pairs fill one 4-value vector; 4 pairs of halves take a
// 4-value vector from each half) and one pair's rotation, a' = a c - b s, b' = b c + a s, where ca
// and cb are the (cos, sin) of a's and of b's angle (one angle for both but with full tables);
// KF_INVERSE: the rotation by -angle.
#if KF_INTERLEAVED
#define KF_G 2
#else
#define KF_G 4
#endif

__device__ __forceinline__ void kf_rotate_pair(float a, float b, float2 ca, float2 cb, float& oa, float& ob)
{
    const float sg = KF_INVERSE ? -1.0f : 1.0f;
    oa = a * ca.x - sg * b * ca.y;
    ob = b * cb.x + sg * a * cb.y;
}
