"""The record of an identified operation, and the comparisons every kind's test uses."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Match:
    """One kind's hypothesis that held: ``binding`` maps each role of the kind (input, output,
    weight, rows, ...) to the kernel parameter that plays it; ``params`` holds what is not a
    parameter (epsilon, function, axis, edge mode ...)."""

    kind: str
    binding: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    source: str = "reference"          #: "reference" (guessed and checked) or "manifest" (stated, checked)

    def describe(self) -> str:
        bind = ", ".join(f"{role}={name}" for role, name in self.binding.items() if name is not None)
        par = ", ".join(f"{k}={_short(v)}" for k, v in self.params.items())
        return f"{self.kind} ({bind}" + (f"; {par}" if par else "") + ")"

    def to_json(self) -> dict:
        return {"name": self.kind, "binding": dict(self.binding), "params": dict(self.params)}


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)) and len(v) > 6:
        return "[" + ", ".join(_short(x) for x in v[:6]) + ", ...]"
    return str(v)


#: bfloat16's unit roundoff (half its ulp relative to a value): a reference that rounds its output to
#: bf16, as the kernel stores it, is off the exact result by up to this much
BF16_ROUNDING = 2.0 ** -8


def close(got: np.ndarray, want: np.ndarray, rtol: float = 2e-3) -> bool:
    """Whether the reference's output ``got`` is ``want`` to within ``rtol`` of the output's scale
    (references compute in float32 or float64; bf16 outputs are compared as float32 values).  A
    ``got`` whose every value is a bfloat16 (a reference that rounds as the kernel stores, llm.c's
    ``(floatX)``) is allowed two of bf16's roundings (the output's and one of a value inside, as the
    kernel rounds it), which is above ``rtol``; whole numbers are not widened."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape or not np.all(np.isfinite(want)):
        return False
    if rtol < 2 * BF16_ROUNDING and _bf16_rounded(got):
        rtol = 2.1 * BF16_ROUNDING      # the output's rounding and one inside (vLLM's act_and_mul rounds act(x) first)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(got - want) <= rtol * np.abs(want) + rtol * 1e-2 * scale + 1e-30))


def _bf16_rounded(got: np.ndarray) -> bool:
    """Whether every value of ``got`` is a bfloat16 and some are not whole numbers."""
    if not got.size or not np.all(np.isfinite(got)):
        return False
    g = got.astype(np.float32)
    if not np.array_equal(g.astype(np.float64), got):
        return False
    return bool(np.all((g.view(np.uint32) & 0xFFFF) == 0) and np.any(g != np.round(g)))


def dims(probe, size: int) -> list[tuple[int, int]]:
    """(rows, cols) splits of a buffer of ``size`` values: cols an integer scalar's value that
    divides it, or the last axis of a 2-D buffer of that size; rows > 1 first."""
    out: list[tuple[int, int]] = []
    for c in probe.int_scalars().values():
        if 1 <= c <= size and size % c == 0 and (size // c, c) not in out:
            out.append((size // c, c))
    for a in probe.task.args:
        if a.is_buffer and probe.sizes[a.name] == size and len(a.shape) >= 2:
            shape = probe.task.shape(a, probe.inputs.case)
            rc = (size // shape[-1], shape[-1])
            if rc not in out:
                out.append(rc)
    return sorted(out, key=lambda rc: (rc[0] == 1 or rc[1] == 1,))


def param_for(probe, value: int, avoid: tuple = ()) -> str | None:
    """The integer scalar holding ``value`` (the first one not in ``avoid``), else a product of
    two to four of them (``"B*T"``, ``"B*T*NH*HS"``), else -- where the task's buffers are of a vector type
    (``float4*``: a count of vectors) -- one of those times the lanes (``"n4*4"``), else the number
    itself where a buffer's shape writes it (a compile-time size), else None."""
    found = _product_for(probe, value, avoid)
    for lanes in sorted({a.param.lanes for a in probe.task.args if a.is_buffer and a.param.lanes > 1}):
        if found is None and value % lanes == 0:
            found = _product_for(probe, value // lanes, avoid)
            found = f"{found}*{lanes}" if found else None
    return found if found is not None else _literal_for(probe, value)


#: the least size a number written in a buffer's shape may stand for (a compile-time constant such as
#: cuda-samples' 256 bins); smaller literals are a pair's 2 or a pixel's 4 channels, not a size
MIN_LITERAL = 16


def _literal_for(probe, value: int) -> str | None:
    """``value`` as written (``"256"``) where a buffer's manifest shape has it as a number, not a
    variable: a size the kernel was compiled with, that no parameter carries."""
    if value < MIN_LITERAL:
        return None
    for a in probe.task.args:
        if a.is_buffer and any(str(e).strip() == str(value) for e in a.shape):
            return str(value)
    return None


def _product_for(probe, value: int, avoid: tuple) -> str | None:
    from itertools import combinations

    names = [n for n in probe.params_of(value) if n not in avoid]
    if names:
        return names[0]
    ints = [(n, v) for n, v in probe.int_scalars().items() if n not in avoid and v > 1]
    for r in (2, 3, 4):                   # B*T, B*T*C, B*T*NH*HS (a rotary embedding's [B, T, NH, HS])
        for combo in combinations(ints, r):
            if int(np.prod([v for _, v in combo])) == value:
                return "*".join(n for n, _ in combo)
    return None
