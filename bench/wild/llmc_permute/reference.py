"""llmc_permute: the NumPy reference (values copied, written in place)."""
import numpy as np


def reference(q, k, v, inp, B, N, NH, d):
    x = np.asarray(inp).reshape(B, N, 3, NH, d)
    for j, out in enumerate((q, k, v)):
        out[...] = x[:, :, j].transpose(0, 2, 1, 3).reshape(out.shape)
