"""Compare a kernel's outputs with the reference's under tolerances.

An element passes when ``|actual - expected| <= atol + rtol * |expected|`` (NumPy's isclose
rule) and NaN/±Inf sit at exactly the same places with the same sign.  Integer outputs are
compared exactly unless the manifest gives a tolerance.  Elements still holding the poison
value are counted as ``unwritten``.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
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


CHUNK = 1 << 20   #: elements per piece of work; large outputs are checked in parallel pieces


@dataclass
class _Part:
    """What one piece of an output contributes to its :class:`OutputCheck`."""

    bad: int
    unwritten: int
    nonfinite_bad: int
    max_abs: float
    max_rel: float
    first: np.ndarray     # flat indices of the first bad elements, in order


def _check_part(a_bits: np.ndarray, e: np.ndarray, offset: int, dtype: DType, tol: Tolerance,
                exact_ints: bool, check_poison: bool, max_report: int) -> _Part:
    if check_poison:
        unwritten = a_bits == np.asarray(poison_value(dtype)).astype(a_bits.dtype)
    else:
        unwritten = np.zeros(a_bits.shape, dtype=bool)
    if dtype.kind != "float" and exact_ints and tol.atol == 0 and tol.rtol == 0:
        a = a_bits.astype(np.int64) if dtype.name != "uint64" else a_bits
        ei = e.astype(a.dtype)
        bad = a != ei
        diff = np.abs(a.astype(np.float64) - ei.astype(np.float64))
        rel = diff / np.maximum(np.abs(ei.astype(np.float64)), 1e-300)
        nonfinite_bad = np.zeros_like(bad)
    else:
        a = to_float(a_bits, dtype).astype(np.float64)
        ef = e.astype(np.float64)
        fin_a, fin_e = np.isfinite(a), np.isfinite(ef)
        both = fin_a & fin_e
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(both, np.abs(a - ef), 0.0)
            close = diff <= tol.atol + tol.rtol * np.abs(np.where(both, ef, 0.0))
            # NaN where NaN, +Inf where +Inf, -Inf where -Inf
            same_nonfinite = (np.isnan(a) & np.isnan(ef)) | (np.isinf(a) & np.isinf(ef) & (np.sign(a) == np.sign(ef)))
        nonfinite_bad = ~both & ~same_nonfinite
        bad = (both & ~close) | nonfinite_bad
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rel = np.where(both, diff / np.maximum(np.abs(ef), np.finfo(np.float64).tiny), 0.0)
    bad |= unwritten
    n_bad = int(np.count_nonzero(bad))
    return _Part(bad=n_bad, unwritten=int(np.count_nonzero(unwritten)),
                 nonfinite_bad=int(np.count_nonzero(nonfinite_bad)),
                 max_abs=float(diff.max()) if diff.size else 0.0, max_rel=float(rel.max()) if rel.size else 0.0,
                 first=(np.flatnonzero(bad)[:max_report] + offset) if n_bad else np.empty(0, np.int64))


def _threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def compare(name: str, actual_storage: np.ndarray, expected: np.ndarray, dtype: DType,
            tol: Tolerance, *, exact_ints: bool = True, check_poison: bool = True,
            max_report: int = 5, chunk: int = CHUNK) -> OutputCheck:
    """``actual_storage`` is the raw output buffer (bf16 as bits); ``expected`` the reference's
    values (any numeric dtype).  Outputs over ``chunk`` elements are checked piecewise on a few
    threads (NumPy releases the GIL); the result does not depend on ``chunk``."""
    actual_storage = np.asarray(actual_storage)
    expected = np.asarray(expected)
    total = int(actual_storage.size)
    if actual_storage.size != expected.size:
        return OutputCheck(name, False, total, mismatches=total,
                           shape_error=f"output has {actual_storage.size} elements, reference {expected.size}")
    expected = expected.reshape(actual_storage.shape)
    flat_a, flat_e = actual_storage.reshape(-1), expected.reshape(-1)
    starts = range(0, total, chunk) if total else [0]

    def part(lo: int) -> _Part:
        hi = min(total, lo + chunk)
        return _check_part(flat_a[lo:hi], flat_e[lo:hi], lo, dtype, tol, exact_ints, check_poison, max_report)

    if len(starts) > 1:
        with ThreadPoolExecutor(max_workers=min(len(starts), _threads()), thread_name_prefix="kforge-verify") as pool:
            parts = list(pool.map(part, starts))
    else:
        parts = [part(0)]
    n_bad = sum(p.bad for p in parts)
    nonfinite = sum(p.nonfinite_bad for p in parts)
    max_abs = max(p.max_abs for p in parts)
    max_rel = max(p.max_rel for p in parts)
    first = []
    if n_bad:
        flat_idx = np.concatenate([p.first for p in parts])[:max_report]
        for f in flat_idx:
            t = tuple(int(i) for i in np.unravel_index(int(f), actual_storage.shape))
            got = to_float(flat_a[int(f):int(f) + 1], dtype)[0] if dtype.kind == "float" else flat_a[int(f)]
            first.append({"index": list(t), "actual": _py(got), "expected": _py(flat_e[int(f)])})
        if nonfinite:
            max_abs = float("inf")
    return OutputCheck(name=name, ok=n_bad == 0, total=total, mismatches=n_bad,
                       unwritten=sum(p.unwritten for p in parts), nonfinite_mismatches=nonfinite,
                       max_abs=max_abs, max_rel=max_rel, first=first)


def outputs_identical(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> list[str]:
    """Names of outputs that differ bit-for-bit between two launches.

    The worker sends an output that its fingerprint shows unchanged as the very array of the first
    launch (see ``gpu/fingerprint.py``); such a pair is identical without reading it."""
    return [k for k in a if a[k] is not b[k]
            and not np.array_equal(np.asarray(a[k]).view(np.uint8), np.asarray(b[k]).view(np.uint8))]
