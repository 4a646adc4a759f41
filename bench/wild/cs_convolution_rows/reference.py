"""cs_convolution_rows: the NumPy reference (float64 inside, written in place): the row pass of
cuda-samples' convolutionSeparable, c_Kernel[KERNEL_RADIUS - j] times the pixel j away, zero outside."""
import numpy as np

TAPS = np.array([0.003815529, 0.008779440, 0.018076899, 0.033306279, 0.054912770, 0.081015040, 0.106955472, 0.126352961, 0.133571220, 0.126352961, 0.106955472, 0.081015040, 0.054912770, 0.033306279, 0.018076899, 0.008779440, 0.003815529])


def reference(d_Dst, d_Src, imageW, imageH, pitch):
    x = d_Src.reshape(imageH, pitch)[:, :imageW].astype(np.float64)
    axis = 1
    p = np.pad(x, ((0, 0), (8, 8)) if axis == 1 else ((8, 8), (0, 0)))
    n = imageW if axis == 1 else imageH
    out = np.zeros_like(x)
    for j in range(-8, 9):
        window = p[:, 8 + j:8 + j + n] if axis == 1 else p[8 + j:8 + j + n, :]
        out += TAPS[8 - j] * window
    d_Dst.reshape(imageH, pitch)[:, :imageW] = out
