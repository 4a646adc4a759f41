"""candle_rope: the NumPy reference of candle's rope (pairs of halves), src [bh, t, d], cos / sin [t, d/2]."""
import numpy as np


def reference(src, cos, sin, dst, bh, td, d):
    t = td // d
    x = np.asarray(src, dtype=np.float64).reshape(bh, t, d)
    c = np.asarray(cos, dtype=np.float64).reshape(t, d // 2)
    s = np.asarray(sin, dtype=np.float64).reshape(t, d // 2)
    a, b = x[..., : d // 2], x[..., d // 2:]
    dst[...] = np.concatenate([a * c - b * s, a * s + b * c], axis=-1).reshape(dst.shape)
