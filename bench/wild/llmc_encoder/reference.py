"""llmc_encoder: the NumPy reference (float64 inside, written in place)."""
import numpy as np


def reference(out, inp, wte, wpe, B, T, C):
    ids = inp.reshape(B, T)
    out[...] = (wte.reshape(-1, C)[ids] + wpe.reshape(T, C)[None, :, :]).reshape(out.shape)
