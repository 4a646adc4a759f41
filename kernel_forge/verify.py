"""Compare a kernel's outputs with the reference's under tolerances.

An element passes when ``|actual - expected| <= atol + rtol * |expected|`` (NumPy's isclose
rule) and NaN/±Inf sit at exactly the same places with the same sign.  Integer outputs are
compared exactly unless the manifest gives a tolerance.  Elements still holding the poison
value are counted as ``unwritten``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .dtypes import DType, poison_value, to_float
from .task import Tolerance


@dataclass
class OutputCheck:
    name: str
    ok: bool
    total: int
    mismatches: int = 0
    unwritten: int = 0
    nonfinite_mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    first: list = field(default_factory=list)   # [{"index": [...], "actual": x, "expected": y}]
    shape_error: str | None = None

    def summary(self) -> str:
        if self.shape_error:
            return f"{self.name}: {self.shape_error}"
        if self.ok:
            return f"{self.name}: ok (max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g})"
        parts = [f"{self.name}: {self.mismatches} of {self.total} elements differ"]
        if self.unwritten:
            parts.append(f"{self.unwritten} never written")
        if self.nonfinite_mismatches:
            parts.append(f"{self.nonfinite_mismatches} NaN/Inf misplaced")
        parts.append(f"max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}")
        if self.first:
            f0 = self.first[0]
            parts.append(f"first at {tuple(f0['index'])}: got {f0['actual']!r}, expected {f0['expected']!r}")
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {"name": self.name, "ok": self.ok, "total": self.total, "mismatches": self.mismatches,
                "unwritten": self.unwritten, "nonfinite_mismatches": self.nonfinite_mismatches,
                "max_abs": _finite(self.max_abs), "max_rel": _finite(self.max_rel),
                "first": self.first, "shape_error": self.shape_error}


def _finite(x: float):
    return x if np.isfinite(x) else str(x)


def _py(x):
    x = x.item() if hasattr(x, "item") else x
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


def compare(name: str, actual_storage: np.ndarray, expected: np.ndarray, dtype: DType,
            tol: Tolerance, *, exact_ints: bool = True, check_poison: bool = True,
            max_report: int = 5) -> OutputCheck:
    """``actual_storage`` is the raw output buffer (bf16 as bits); ``expected`` the reference's
    values (any numeric dtype)."""
    actual_storage = np.asarray(actual_storage)
    expected = np.asarray(expected)
    total = int(actual_storage.size)
    if actual_storage.size != expected.size:
        return OutputCheck(name, False, total, mismatches=total,
                           shape_error=f"output has {actual_storage.size} elements, reference {expected.size}")
    expected = expected.reshape(actual_storage.shape)
    unwritten_mask = np.zeros(actual_storage.shape, dtype=bool)
    if check_poison:
        pv = poison_value(dtype)
        unwritten_mask = actual_storage == np.asarray(pv).astype(actual_storage.dtype)
    if dtype.kind != "float" and exact_ints and tol.atol == 0 and tol.rtol == 0:
        a = actual_storage.astype(np.int64) if dtype.name != "uint64" else actual_storage
        e = expected.astype(a.dtype)
        bad = a != e
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        rel = diff / np.maximum(np.abs(e.astype(np.float64)), 1e-300)
        nonfinite_bad = np.zeros_like(bad)
    else:
        a = to_float(actual_storage, dtype).astype(np.float64)
        e = expected.astype(np.float64)
        fin_a, fin_e = np.isfinite(a), np.isfinite(e)
        both = fin_a & fin_e
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(both, np.abs(a - e), 0.0)
            close = diff <= tol.atol + tol.rtol * np.abs(np.where(both, e, 0.0))
            # NaN where NaN, +Inf where +Inf, -Inf where -Inf
            same_nonfinite = (np.isnan(a) & np.isnan(e)) | (np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e)))
        nonfinite_bad = ~both & ~same_nonfinite
        bad = (both & ~close) | nonfinite_bad
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rel = np.where(both, diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny), 0.0)
    bad = bad | unwritten_mask
    n_bad = int(bad.sum())
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float(rel.max()) if rel.size else 0.0
    first = []
    if n_bad:
        idx = np.argwhere(bad)[:max_report]
        av = to_float(actual_storage, dtype) if dtype.kind == "float" else actual_storage
        for ix in idx:
            t = tuple(int(i) for i in ix)
            first.append({"index": list(t), "actual": _py(av[t]), "expected": _py(expected[t])})
        if np.any(nonfinite_bad):
            max_abs = float("inf")
    return OutputCheck(name=name, ok=n_bad == 0, total=total, mismatches=n_bad,
                       unwritten=int(unwritten_mask.sum()), nonfinite_mismatches=int(nonfinite_bad.sum()),
                       max_abs=max_abs, max_rel=max_rel, first=first)


def outputs_identical(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> list[str]:
    """Names of outputs that differ bit-for-bit between two launches."""
    return [k for k in a if not np.array_equal(np.asarray(a[k]).view(np.uint8), np.asarray(b[k]).view(np.uint8))]
