"""llmc_bias_backward: the NumPy reference (float64 inside, written in place)."""
import numpy as np


def reference(dbias, dout, B, T, OC):
    dbias[...] = dbias + dout.reshape(B * T, OC).astype(np.float64).sum(axis=0)
