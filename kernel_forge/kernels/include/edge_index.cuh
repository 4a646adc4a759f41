// kforge kinds: the index a stencil reads for position i of an axis of n under the edge modes of
// kernel_forge/kinds/spatial.py's STENCIL_EDGES (KF_EDGE): 0 the nearest pixel, 2 reflected without
// the edge pixel (-1 -> 1), 3 with it (-1 -> 0), 4 periodic; in range for |i| < 2n.  Mode 1 (zero)
// reads nothing outside: callers test the range themselves.  Modes 5 and 6 are borders (KF_BORDER):
// the outputs within the stencil's reach of an edge are not computed but keep x's value (5) or are 0
// (6); what they would read is clamped and thrown away.
#define KF_BORDER (KF_EDGE == 5 || KF_EDGE == 6)
__device__ __forceinline__ int kf_edge(int i, int n)
{
#if KF_EDGE == 2
    i = i < 0 ? -i : (i >= n ? 2 * n - 2 - i : i);
#elif KF_EDGE == 3
    i = i < 0 ? -i - 1 : (i >= n ? 2 * n - 1 - i : i);
#elif KF_EDGE == 4
    i = i < 0 ? i + n : (i >= n ? i - n : i);
#endif
    return min(max(i, 0), n - 1);
}

// a border mode's output at an edge: x's value (5) or 0 (6)
template <typename T> __device__ __forceinline__ kf_acc_t kf_border_value(const T* p)
{
#if KF_EDGE == 5
    return kf_ld(p);
#else
    (void)p;
    return (kf_acc_t)0;
#endif
}
