"""Planted outputs for the tests of the GPU output checks (kernel_forge/gpu/compare.py) and the
masks: a stored actual and its expected values with exact matches, near misses, mismatches,
NaN/Inf and poison, for any stored type and tolerance."""
from __future__ import annotations

import numpy as np

from kernel_forge.common.dtypes import from_float, poison_value

def planted(dtype, n, seed, tol):
    """(stored actual, expected) with exact matches, near misses, mismatches, NaN/Inf and poison."""
    rng = np.random.default_rng(seed)

    def pick(k):
        return rng.integers(0, n, size=k)

    if dtype.kind == "float":
        expected = rng.standard_normal(n) * 4
        expected[pick(3)] = 1e-30          # tiny references (max rel floor)
        limit = tol.atol + tol.rtol * np.abs(expected)
        values = expected + rng.uniform(-0.9, 0.9, n) * limit     # within tolerance
        values[pick(11)] += 3.0            # beyond
        for v in (np.nan, np.inf, -np.inf):
            values[pick(2)] = v
            expected[pick(2)] = v
        both = pick(4)
        values[both[:2]], expected[both[:2]] = np.nan, np.nan       # NaN where NaN
        values[both[2:]], expected[both[2:]] = -np.inf, -np.inf
        if dtype.name == "bfloat16":
            actual = from_float(values.astype(np.float32), dtype)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                actual = values.astype(dtype.numpy)
        ref = expected.astype(np.float32) if dtype.name in ("float32", "bfloat16") else expected
    else:
        info = np.iinfo(dtype.numpy)
        lo, hi = max(info.min, -1000), min(info.max, 1000)
        ref = rng.integers(lo, hi, n).astype(dtype.numpy)
        actual = ref.copy()
        actual[pick(9)] = rng.integers(lo, hi, 9).astype(dtype.numpy)
    actual = np.asarray(actual)
    actual[pick(5)] = np.asarray(poison_value(dtype)).astype(actual.dtype)
    return actual, ref
