"""vector_add: c = a + b.

IEEE float32 addition is correctly rounded, so the float32 sum is exactly what a float64 sum
rounded once to float32 gives, without float64 temporaries (which make the 2^26 case slow).
``cupy_add`` is the vendor baseline.
"""
import numpy as np


def reference(a, b, c, n):
    np.add(a.astype(np.float32, copy=False), b.astype(np.float32, copy=False), out=c)


def cupy_add(a, b, c, n):
    import cupy

    cupy.add(a, b, out=c)
