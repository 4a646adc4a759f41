"""Warnings about weak cases: ones a wrong kernel could pass.

Run by ``kforge validate`` on the CPU.  What the inputs can hold is decided from each buffer's
``init`` without drawing it (an input that the kernel may branch on never takes a negative value
although its type is signed; an input that is constant).  The reference is run only on cases
small enough to be cheap (all of them with ``--deep``, as long as they fit the host), and a case
is weak when an all-zeros or constant output would pass the tolerance.
"""
from __future__ import annotations

import math

import numpy as np

from kernel_forge.model.references import python_name
from kernel_forge.model.reference_process import reference_outputs
from kernel_forge.model.task import Arg, Case, Task


def case_size(task: Task, case: Case) -> int:
    """Elements of all of ``case``'s buffers together."""
    return sum(math.prod(task.shape(a, case)) for a in task.args if a.is_buffer)


def _npy_extremes(task: Task, arg: Arg) -> tuple[float, float, bool]:
    """(min, max, constant) of an .npy input, read through a memory map in chunks."""
    path = (task.path.parent / arg.init.get("path")).resolve()
    values = np.load(path, mmap_mode="r", allow_pickle=False).reshape(-1)
    lo, hi, first = math.inf, -math.inf, (values[0] if values.size else 0)
    constant = True
    step = 1 << 22
    for i in range(0, values.size, step):
        part = np.asarray(values[i:i + step])
        lo, hi = min(lo, float(part.min())), max(hi, float(part.max()))
        constant = constant and bool(np.all(part == first))
    return lo, hi, constant


def _input_range(task: Task, arg: Arg, case: Case) -> tuple[float, float, bool]:
    """(lowest value, highest value, constant) an input's init can produce on ``case``, without drawing it."""
    integer = arg.param.dtype.kind != "float"
    kind = arg.init.kind
    init = arg.init.numbers(case.vars)
    if kind == "zeros":
        return 0.0, 0.0, True
    if kind == "ones":
        return 1.0, 1.0, True
    if kind == "constant":
        v = float(init.get("value"))
        return v, v, True
    if kind == "arange":
        start, step = float(init.get("start", 0)), float(init.get("step", 1))
        return (start, math.inf, step == 0) if step >= 0 else (-math.inf, start, False)
    if kind == "uniform":
        lo, hi = float(init.get("low", -1.0)), float(init.get("high", 1.0))
        if integer:
            lo, hi = float(np.rint(lo)), float(np.rint(hi))
        return lo, hi, lo == hi
    if kind == "randint":
        lo, hi = float(init.get("low", 0)), float(init.get("high", 100))
        return lo, hi - 1, hi - lo <= 1
    if kind == "normal":
        mean, std = float(init.get("mean", 0.0)), float(init.get("std", 1.0))
        if std == 0:
            return mean, mean, True
        # six standard deviations: what a draw of any practical size can reach
        return mean - 6 * std, mean + 6 * std, False
    if kind == "npy":
        return _npy_extremes(task, arg)
    return -math.inf, math.inf, False


def input_warnings(task: Task, case: Case) -> list[str]:
    """Inputs of ``case`` that can hide bugs, decided from their init (nothing is allocated)."""
    out = []
    for arg in task.args:
        if not arg.is_buffer or arg.output or arg.init is None:
            continue
        if math.prod(task.shape(arg, case)) <= 1:
            continue
        dt = arg.param.dtype
        lo, _hi, constant = _input_range(task, arg, case)
        # integers drawn from a range are indices, token ids, counts: non-negative by design
        if (dt.kind == "float" or (dt.kind == "int" and arg.init.kind != "randint")) and lo >= 0:
            out.append(f"case {case.name}: input {arg.name} ({dt.name}) is never negative; a kernel "
                       "that mishandles signs would pass (use a signed init such as normal)")
        if constant:
            out.append(f"case {case.name}: input {arg.name} is constant; indexing bugs would pass")
    return out


def output_warnings(task: Task, case: Case, seed: int = 1) -> list[str]:
    """Outputs of ``case`` that all-zeros or a constant would match (runs the reference)."""
    out = []
    expected = reference_outputs(task, case, seed)
    for arg in task.outputs:
        e = np.asarray(expected[arg.name], dtype=np.float64)
        tol = task.tolerance_for(arg)
        if e.size == 0:
            continue
        if not np.isfinite(e).any():
            out.append(f"case {case.name}: output {arg.name} is NaN or Inf everywhere; a kernel writing NaN "
                       "passes (nonfinite_outputs is set)")
            continue
        if arg.init is None and not np.any(e):
            py = python_name(arg.name)
            out.append(f"case {case.name}: output {arg.name} is all zeros, as it was before the reference ran: does "
                       f"the reference write it in place ({py}[...] = ...)? Rebinding the name ({py} = ...) writes "
                       "nothing, and a kernel writing zeros passes")
            continue
        if np.all(np.abs(e) <= tol.atol + tol.rtol * np.abs(e)):
            out.append(f"case {case.name}: output {arg.name} is within tolerance of all zeros "
                       f"(max |ref| {np.abs(e).max():.3g} vs atol {tol.atol}); a kernel writing zeros passes")
            continue
        if e.size > 1:
            c = float(np.median(e))
            if np.all(np.abs(e - c) <= tol.atol + tol.rtol * np.abs(e)):
                out.append(f"case {case.name}: output {arg.name} is within tolerance of the constant "
                           f"{c:.4g}; a kernel writing one value passes")
    return out


def weak_case_warnings(task: Task, *, max_elements: int = 1 << 24, seed: int = 1,
                       fits=lambda case: True, skipped: list | None = None, run_reference: bool = True) -> list[str]:
    """Every weak-case warning of ``task``.  The reference runs on the cases with at most
    ``max_elements`` buffer elements for which ``fits(case)`` holds; the others are appended to
    ``skipped`` (when given) as (case, reason).  ``run_reference`` False: the inputs' warnings
    only (nothing runs)."""
    warnings: list[str] = [f"atol and rtol are both 0 for the floating-point output {a.name}: only a bit-exact kernel "
                           "passes (right for a copy, a cast or a permute; arithmetic in another order needs rtol >= 1e-5 "
                           "in float32)" for a in task.outputs
                           if a.param.dtype.is_float and task.tolerance_for(a).atol == 0 and task.tolerance_for(a).rtol == 0]
    for case in task.cases:
        warnings += input_warnings(task, case)
        if task.reference.kind != "python" or not run_reference:
            continue
        n = case_size(task, case)
        if n > max_elements:
            if skipped is not None:
                skipped.append((case, f"over {max_elements} elements (--deep runs them)"))
            continue
        if not fits(case):
            if skipped is not None:
                skipped.append((case, "too large for this host's memory"))
            continue
        warnings += output_warnings(task, case, seed)
    return warnings
