"""gelu_bf16 (tanh approximation): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

Computed in float64 and returned unrounded (the harness compares the kernel's bf16 output with
these full-precision values).  x arrives as float32 values that are exactly bf16 numbers, so
there are at most 65536 distinct inputs: the function is evaluated once per distinct bf16 bit
pattern and gathered, which keeps large cases fast.  Inputs that are not bf16-exact fall back to
direct evaluation.  No vendor baseline: CuPy has no bfloat16.
"""
import numpy as np

_SQRT_2_OVER_PI = np.sqrt(2.0 / np.pi)


def _gelu64(v):
    v = np.asarray(v, dtype=np.float64)
    return 0.5 * v * (1.0 + np.tanh(_SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)))


_TABLE = None


def _table():
    global _TABLE
    if _TABLE is None:
        values = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            _TABLE = _gelu64(values)
    return _TABLE


def reference(x, y, n):
    xf = np.ascontiguousarray(x[:n], dtype=np.float32)
    bits = xf.view(np.uint32)
    if np.any(bits & 0xFFFF):
        values = _gelu64(xf)
    else:
        values = _table()[bits >> 16]
    y[:n] = values.astype(y.dtype)
