"""llmc_gelu: the NumPy reference (float64 inside, written in place)."""
import numpy as np


def reference(out, inp, N):
    x = inp.astype(np.float64)
    out[...] = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
