"""llmc_xent_backward: the NumPy reference, dlogits[b, t, i] += (probs[b, t, i] - (i == targets[b, t])) * dlosses[b, t]."""
import numpy as np


def reference(dlogits, dlosses, probs, targets, B, T, V):
    p = np.asarray(probs, dtype=np.float64).reshape(B * T, V)
    rows = np.arange(B * T)
    d = np.asarray(dlogits, dtype=np.float64).reshape(B * T, V) + p * np.asarray(dlosses, dtype=np.float64).reshape(B * T, 1)
    d[rows, np.asarray(targets).reshape(-1).astype(np.int64)] -= np.asarray(dlosses, dtype=np.float64).reshape(-1)
    dlogits[...] = d.reshape(dlogits.shape)
