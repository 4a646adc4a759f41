"""cs_transpose: the NumPy reference (float64 inside, written in place)."""
import numpy as np


def reference(odata, idata, width, height):
    odata[...] = np.ascontiguousarray(idata.reshape(height, width).T).reshape(odata.shape)
