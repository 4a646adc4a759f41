// kforge: what a kernel written inside PyTorch (ATen / c10) uses of it on the device, for kernels
// brought from such a project (kforge init puts this include where it left out the ATen, c10 or
// torch ones): the 16-bit types as CUDA's own, the warp size, the launch-bounds macros and the
// shuffle wrappers.  Written for kernel_forge; nothing of PyTorch is copied.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
namespace c10 {
typedef __half Half;
typedef __nv_bfloat16 BFloat16;
}
namespace at {
using c10::Half;
using c10::BFloat16;
}
#ifndef C10_WARP_SIZE
#define C10_WARP_SIZE 32
#endif
#ifndef C10_DEVICE
#define C10_DEVICE __device__
#endif
#ifndef C10_HOST_DEVICE
#define C10_HOST_DEVICE __host__ __device__
#endif
#ifndef C10_LAUNCH_BOUNDS_0
#define C10_LAUNCH_BOUNDS_0 __launch_bounds__(256, 4)
#endif
#ifndef C10_LAUNCH_BOUNDS_1
#define C10_LAUNCH_BOUNDS_1(max_threads_per_block) __launch_bounds__((max_threads_per_block))
#endif
#ifndef C10_LAUNCH_BOUNDS_2
#define C10_LAUNCH_BOUNDS_2(max_threads_per_block, min_blocks_per_sm) \
    __launch_bounds__((max_threads_per_block), (min_blocks_per_sm))
#endif
template <typename T>
__device__ __forceinline__ T WARP_SHFL(T value, int lane, int width = 32, unsigned int mask = 0xffffffffu)
{ return __shfl_sync(mask, value, lane, width); }
template <typename T>
__device__ __forceinline__ T WARP_SHFL_XOR(T value, int lane_mask, int width = 32, unsigned int mask = 0xffffffffu)
{ return __shfl_xor_sync(mask, value, lane_mask, width); }
template <typename T>
__device__ __forceinline__ T WARP_SHFL_UP(T value, unsigned int delta, int width = 32, unsigned int mask = 0xffffffffu)
{ return __shfl_up_sync(mask, value, delta, width); }
template <typename T>
__device__ __forceinline__ T WARP_SHFL_DOWN(T value, unsigned int delta, int width = 32, unsigned int mask = 0xffffffffu)
{ return __shfl_down_sync(mask, value, delta, width); }
__device__ __forceinline__ unsigned int WARP_BALLOT(int predicate, unsigned int mask = 0xffffffffu)
{ return __ballot_sync(mask, predicate); }
