"""blur3x3: 3x3 box blur with edge pixels duplicated (clamped indices), as cuda-samples boxFilter does at r = 1."""
import numpy as np


def reference(x, y, h, w):
    a = x.reshape(h, w)
    p = np.pad(a, 1, mode="edge")
    s = sum(p[i:i + h, j:j + w] for i in range(3) for j in range(3))
    y[...] = (s * np.float32(1.0 / 9.0)).reshape(y.shape)
