// task: gelu_bf16
// expect: unwritten
// note: the kernel returns without writing y. Every element of y still holds the bf16 poison
// note: pattern 0xFF7F, so every mismatch is an unwritten element and the checker says unwritten.
#include <cuda_bf16.h>

extern "C" __global__ void gelu_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, int n)
{
    // "nothing to do": reads nothing, writes nothing
    (void)x;
    (void)y;
    (void)n;
}
