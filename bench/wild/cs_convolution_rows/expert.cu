// kforge: grid = [W / (8 * 16), H / 4]
// kforge: block = [16, 4]
// Ported from https://github.com/NVIDIA/cuda-samples (BSD-3-Clause),
// Samples/2_Concepts_and_Techniques/convolutionSeparable/convolutionSeparable.cu at commit c94ff366aed1:
// convolutionRowsKernel (a 16 x 4 block stages 8 result steps and a halo step of each row in shared
// memory; imageW a multiple of 128, imageH of 4).  Changed for NVRTC: extern "C", cg::sync as
// __syncthreads, c_Kernel initialised here (the sample copies it from the host).
// Copyright (c) 2022, NVIDIA CORPORATION. All rights reserved.  BSD-3-Clause: redistribution and use
// in source and binary forms, with or without modification, are permitted provided that the
// conditions of the licence are met (https://github.com/NVIDIA/cuda-samples/blob/master/LICENSE);
// provided AS IS, without warranty of any kind.
#define KERNEL_RADIUS 8
#define KERNEL_LENGTH (2 * KERNEL_RADIUS + 1)
__constant__ float c_Kernel[KERNEL_LENGTH] = {0.003815529f, 0.008779440f, 0.018076899f, 0.033306279f, 0.054912770f, 0.081015040f, 0.106955472f, 0.126352961f, 0.133571220f, 0.126352961f, 0.106955472f, 0.081015040f, 0.054912770f, 0.033306279f, 0.018076899f, 0.008779440f, 0.003815529f};

#define ROWS_BLOCKDIM_X 16
#define ROWS_BLOCKDIM_Y 4
#define ROWS_RESULT_STEPS 8
#define ROWS_HALO_STEPS 1

extern "C" __global__ void convolutionRowsKernel(float *d_Dst, float *d_Src, int imageW,
                                      int imageH, int pitch) {
  __shared__ float
      s_Data[ROWS_BLOCKDIM_Y][(ROWS_RESULT_STEPS + 2 * ROWS_HALO_STEPS) *
                              ROWS_BLOCKDIM_X];

  // Offset to the left halo edge
  const int baseX =
      (blockIdx.x * ROWS_RESULT_STEPS - ROWS_HALO_STEPS) * ROWS_BLOCKDIM_X +
      threadIdx.x;
  const int baseY = blockIdx.y * ROWS_BLOCKDIM_Y + threadIdx.y;

  d_Src += baseY * pitch + baseX;
  d_Dst += baseY * pitch + baseX;

// Load main data
#pragma unroll

  for (int i = ROWS_HALO_STEPS; i < ROWS_HALO_STEPS + ROWS_RESULT_STEPS; i++) {
    s_Data[threadIdx.y][threadIdx.x + i * ROWS_BLOCKDIM_X] =
        d_Src[i * ROWS_BLOCKDIM_X];
  }

// Load left halo
#pragma unroll

  for (int i = 0; i < ROWS_HALO_STEPS; i++) {
    s_Data[threadIdx.y][threadIdx.x + i * ROWS_BLOCKDIM_X] =
        (baseX >= -i * ROWS_BLOCKDIM_X) ? d_Src[i * ROWS_BLOCKDIM_X] : 0;
  }

// Load right halo
#pragma unroll

  for (int i = ROWS_HALO_STEPS + ROWS_RESULT_STEPS;
       i < ROWS_HALO_STEPS + ROWS_RESULT_STEPS + ROWS_HALO_STEPS; i++) {
    s_Data[threadIdx.y][threadIdx.x + i * ROWS_BLOCKDIM_X] =
        (imageW - baseX > i * ROWS_BLOCKDIM_X) ? d_Src[i * ROWS_BLOCKDIM_X] : 0;
  }

  // Compute and store results
  __syncthreads();
#pragma unroll

  for (int i = ROWS_HALO_STEPS; i < ROWS_HALO_STEPS + ROWS_RESULT_STEPS; i++) {
    float sum = 0;

#pragma unroll

    for (int j = -KERNEL_RADIUS; j <= KERNEL_RADIUS; j++) {
      sum += c_Kernel[KERNEL_RADIUS - j] *
             s_Data[threadIdx.y][threadIdx.x + i * ROWS_BLOCKDIM_X + j];
    }

    d_Dst[i * ROWS_BLOCKDIM_X] = sum;
  }
}
