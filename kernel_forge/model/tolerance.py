"""Compare a kernel's outputs with the reference's under tolerances: the specification.

An element passes when ``|actual - expected| <= atol + rtol * |expected|`` (NumPy's isclose
rule) and NaN/±Inf sit at exactly the same places with the same sign.  Integer outputs are
compared exactly unless the manifest gives a tolerance.  Elements still holding the poison
value, where the reference has another, are counted as ``unwritten``.

The error columns, over the elements where both values are finite:

- ``max_abs``: the largest ``|actual - expected|``;
- ``max_rel``: the largest ``|actual - expected| / max(|expected|, floor)`` where ``floor`` is
  ``atol / rtol`` (below that magnitude the tolerance is absolute, so a relative error there
  means nothing), ``atol`` when ``rtol`` is 0, and 1 for exactly compared integers
  (:func:`rel_floor`);
- ``tol_ratio``: the largest ``|actual - expected| / (atol + rtol * |expected|)``: how much of its
  tolerance the worst element used (1.0 = at the limit; 0 where the difference is 0).

The gate checks outputs on the GPU (``gpu/compare.py``) with these same formulas and tests that
it agrees with :func:`compare` bit for bit; this module is the CPU fallback and the check of the
sampled elements (:func:`element_checks`).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from kernel_forge.common.dtypes import DType, poison_value, to_float
from kernel_forge.model.task import Tolerance


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
    #: the worst element's |actual - expected| / (atol + rtol * |expected|): 1.0 is at the limit
    tol_ratio: float = 0.0

    def summary(self) -> str:
        if self.shape_error:
            return f"{self.name}: {self.shape_error}"
        if self.ok:
            return (f"{self.name}: ok (max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, "
                    f"worst {self.tol_ratio:.3g} of tolerance)")
        parts = [f"{self.name}: {self.mismatches} of {self.total} elements differ"]
        if self.unwritten:
            parts.append(f"{self.unwritten} never written")
        if self.nonfinite_mismatches:
            parts.append(f"{self.nonfinite_mismatches} NaN/Inf misplaced")
        parts.append(f"max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, "
                     f"worst {self.tol_ratio:.3g} of tolerance")
        if self.first:
            f0 = self.first[0]
            parts.append(f"first at {tuple(f0['index'])}: got {f0['actual']!r}, expected {f0['expected']!r}")
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {"name": self.name, "ok": self.ok, "total": self.total, "mismatches": self.mismatches,
                "unwritten": self.unwritten, "nonfinite_mismatches": self.nonfinite_mismatches,
                "max_abs": _finite(self.max_abs), "max_rel": _finite(self.max_rel),
                "tol_ratio": _finite(self.tol_ratio), "first": self.first, "shape_error": self.shape_error}


def _finite(x: float):
    return x if np.isfinite(x) else str(x)


def _py(x):
    x = x.item() if hasattr(x, "item") else x
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


CHUNK = 1 << 20   #: elements per piece of work; large outputs are checked in parallel pieces


def exact(dtype: DType, tol: Tolerance, exact_ints: bool = True) -> bool:
    """Whether outputs of ``dtype`` are compared exactly (integers without a tolerance)."""
    return dtype.kind != "float" and exact_ints and tol.atol == 0 and tol.rtol == 0


def rel_floor(dtype: DType, tol: Tolerance, exact_ints: bool = True) -> float:
    """The smallest magnitude a relative error is taken against (see the module docstring)."""
    if exact(dtype, tol, exact_ints):
        return 1.0
    floor = tol.atol / tol.rtol if tol.rtol > 0 else tol.atol
    return max(float(floor), float(np.finfo(np.float64).tiny))


@dataclass
class Elements:
    """Per-element results of a comparison (all arrays of the compared shape)."""

    bad: np.ndarray            #: fails: beyond tolerance, NaN/Inf misplaced, or unwritten
    unwritten: np.ndarray      #: still holds the poison value, where the reference has another
    nonfinite_bad: np.ndarray  #: NaN/Inf where the reference has none, or a different one
    diff: np.ndarray           #: |actual - expected| where both are finite, else 0
    rel: np.ndarray            #: diff / max(|expected|, rel_floor), where both are finite, else 0
    ratio: np.ndarray          #: diff / (atol + rtol |expected|) (0 where diff is 0), where both are finite


def element_checks(a_bits: np.ndarray, e: np.ndarray, dtype: DType, tol: Tolerance, *,
                   exact_ints: bool = True, check_poison: bool = True) -> Elements:
    """Compare stored values ``a_bits`` (bf16 as bits) with reference values ``e`` elementwise."""
    a_bits, e = np.asarray(a_bits), np.asarray(e)
    if check_poison:
        unwritten = a_bits == np.asarray(poison_value(dtype)).astype(a_bits.dtype)
    else:
        unwritten = np.zeros(a_bits.shape, dtype=bool)
    floor = rel_floor(dtype, tol, exact_ints)
    if exact(dtype, tol, exact_ints):
        a = a_bits.astype(np.int64) if dtype.name != "uint64" else a_bits
        ei = e.astype(a.dtype)
        bad = a != ei
        diff = np.abs(a.astype(np.float64) - ei.astype(np.float64))
        rel = diff / np.maximum(np.abs(ei.astype(np.float64)), floor)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diff == 0, 0.0, np.inf)
        nonfinite_bad = np.zeros_like(bad)
    else:
        a = to_float(a_bits, dtype).astype(np.float64)
        ef = e.astype(np.float64)
        fin_a, fin_e = np.isfinite(a), np.isfinite(ef)
        both = fin_a & fin_e
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            diff = np.where(both, np.abs(a - ef), 0.0)
            limit = tol.atol + tol.rtol * np.abs(np.where(both, ef, 0.0))
            close = diff <= limit
            # NaN where NaN, +Inf where +Inf, -Inf where -Inf
            same_nonfinite = (np.isnan(a) & np.isnan(ef)) | (np.isinf(a) & np.isinf(ef) & (np.sign(a) == np.sign(ef)))
            rel = np.where(both, diff / np.maximum(np.abs(np.where(both, ef, 0.0)), floor), 0.0)
            ratio = np.where(both & (diff != 0), diff / limit, 0.0)
        nonfinite_bad = ~both & ~same_nonfinite
        bad = (both & ~close) | nonfinite_bad
    # the poison counts as unwritten only where it is wrong: where the reference has that very value
    # (an int8 output's -127, an fp16 output saturated to -65504) the kernel wrote it
    unwritten = unwritten & bad
    return Elements(bad=bad, unwritten=unwritten, nonfinite_bad=nonfinite_bad, diff=diff, rel=rel, ratio=ratio)


@dataclass
class _Part:
    """What one piece of an output contributes to its :class:`OutputCheck`."""

    bad: int
    unwritten: int
    nonfinite_bad: int
    max_abs: float
    max_rel: float
    tol_ratio: float
    first: np.ndarray     # flat indices of the first bad elements, in order


def _check_part(a_bits: np.ndarray, e: np.ndarray, offset: int, dtype: DType, tol: Tolerance,
                exact_ints: bool, check_poison: bool, max_report: int) -> _Part:
    el = element_checks(a_bits, e, dtype, tol, exact_ints=exact_ints, check_poison=check_poison)
    n_bad = int(np.count_nonzero(el.bad))
    size = el.diff.size
    return _Part(bad=n_bad, unwritten=int(np.count_nonzero(el.unwritten)),
                 nonfinite_bad=int(np.count_nonzero(el.nonfinite_bad)),
                 max_abs=float(el.diff.max()) if size else 0.0, max_rel=float(el.rel.max()) if size else 0.0,
                 tol_ratio=float(el.ratio.max()) if size else 0.0,
                 first=(np.flatnonzero(el.bad)[:max_report] + offset) if n_bad else np.empty(0, np.int64))


def first_entries(flat_idx, actual_values: np.ndarray, expected_values: np.ndarray, dtype: DType,
                  shape: tuple[int, ...]) -> list[dict]:
    """The ``first`` list of an :class:`OutputCheck`: index (unravelled), actual, expected, where
    ``actual_values``/``expected_values`` hold the stored/reference values at ``flat_idx``."""
    out = []
    actual_values = np.asarray(actual_values)
    for j, f in enumerate(flat_idx):
        t = tuple(int(i) for i in np.unravel_index(int(f), shape))
        out.append({"index": list(t), "actual": stored_value(actual_values[j:j + 1], dtype),
                     "expected": _py(np.asarray(expected_values)[j])})
    return out


def stored_value(one: np.ndarray, dtype: DType):
    """The JSON value of one stored element (a length-1 array; bf16 as bits) as reports show it."""
    one = np.asarray(one).reshape(1)
    return _py(to_float(one, dtype)[0] if dtype.kind == "float" else one[0])


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
    first = []
    if n_bad:
        flat_idx = np.concatenate([p.first for p in parts])[:max_report].astype(np.int64)
        first = first_entries(flat_idx, flat_a[flat_idx], flat_e[flat_idx], dtype, actual_storage.shape)
        if nonfinite:
            max_abs = float("inf")
    return OutputCheck(name=name, ok=n_bad == 0, total=total, mismatches=n_bad,
                       unwritten=sum(p.unwritten for p in parts), nonfinite_mismatches=nonfinite,
                       max_abs=max_abs, max_rel=max(p.max_rel for p in parts), first=first,
                       tol_ratio=max(p.tol_ratio for p in parts))


def outputs_identical(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> list[str]:
    """Names of outputs that differ bit-for-bit between two launches.

    The worker sends an output that its fingerprint shows unchanged as the very array of the first
    launch (see ``gpu/fingerprint.py``); such a pair is identical without reading it."""
    return [k for k in a if a[k] is not b[k]
            and not np.array_equal(np.asarray(a[k]).view(np.uint8), np.asarray(b[k]).view(np.uint8))]


def device_expected_dtype(dtype: DType, tol: Tolerance, *, exact_ints: bool = True) -> np.dtype:
    """The dtype :func:`device_expected` gives for an output of ``dtype`` when the reference
    returns its values as the gate's references do (float32 for float32 and bfloat16 outputs, the
    storage dtype otherwise): known before the reference runs, so the worker can keep room for
    the expected values beside the case's buffers (gpu/resident.py)."""
    if exact(dtype, tol, exact_ints):
        return np.dtype(np.uint64 if dtype.name == "uint64" else np.int64)
    if dtype.name in ("float32", "bfloat16"):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def device_expected(expected: np.ndarray, dtype: DType, tol: Tolerance, *, exact_ints: bool = True) -> np.ndarray:
    """The reference values as the GPU comparison reads them, converted exactly as
    :func:`element_checks` converts them: int64 (uint64) for exactly compared integers, float32
    kept as is (widened exactly on the GPU), float64 otherwise."""
    expected = np.ascontiguousarray(expected).reshape(-1)
    if exact(dtype, tol, exact_ints):
        return expected.astype(np.uint64 if dtype.name == "uint64" else np.int64)
    if expected.dtype == np.float32:
        return expected
    return expected.astype(np.float64)
