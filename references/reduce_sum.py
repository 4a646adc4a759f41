"""reduce_sum: out[0] = sum(x), computed in float64 (math.fsum-grade accuracy is not needed:
float64 pairwise summation of float32 data is exact to far below the tolerance)."""
import numpy as np


def reference(x, out, n):
    out[0] = np.sum(x[:n], dtype=np.float64)


def cupy_sum(x, out, n):
    """Vendor baseline: CuPy's reduction writing straight into the one-element output."""
    import cupy

    cupy.sum(x, axis=0, keepdims=True, out=out)
