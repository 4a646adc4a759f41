"""Warnings about weak cases: ones a wrong kernel could pass.

Run by ``kforge validate`` on the CPU: the reference is computed for each case, and a case is
weak when an all-zeros or constant output would pass the tolerance, or when an input that the
kernel may branch on never takes a negative value although its type is signed.
"""
from __future__ import annotations

import numpy as np

from .inputs import generate, host_values
from .references import run_python_reference
from .task import Case, Task


def case_size(task: Task, case: Case) -> int:
    return sum(int(np.prod(task.shape(a, case))) for a in task.args if a.is_buffer)


def weak_case_warnings(task: Task, *, max_elements: int = 1 << 24, seed: int = 1) -> list[str]:
    warnings: list[str] = []
    for case in task.cases:
        inputs = generate(task, case, seed)
        for arg in task.args:
            if not arg.is_buffer or arg.output:
                continue
            dt = arg.param.dtype
            values = host_values(arg, inputs.buffers[arg.name])
            if dt.kind in ("float", "int") and values.size > 1 and np.all(values >= 0):
                warnings.append(f"case {case.name}: input {arg.name} ({dt.name}) is never negative; a kernel "
                                "that mishandles signs would pass (use a signed init such as normal)")
            if values.size > 1 and np.all(values == values.flat[0]):
                warnings.append(f"case {case.name}: input {arg.name} is constant; indexing bugs would pass")
        if task.reference.kind != "python" or case_size(task, case) > max_elements:
            continue
        expected = run_python_reference(task, inputs)
        for arg in task.outputs:
            e = np.asarray(expected[arg.name], dtype=np.float64)
            tol = task.tolerance_for(arg)
            if e.size == 0:
                continue
            if np.all(np.abs(e) <= tol.atol + tol.rtol * np.abs(e)):
                warnings.append(f"case {case.name}: output {arg.name} is within tolerance of all zeros "
                                f"(max |ref| {np.abs(e).max():.3g} vs atol {tol.atol}); a kernel writing zeros passes")
                continue
            if e.size > 1:
                c = float(np.median(e))
                if np.all(np.abs(e - c) <= tol.atol + tol.rtol * np.abs(e)):
                    warnings.append(f"case {case.name}: output {arg.name} is within tolerance of the constant "
                                    f"{c:.4g}; a kernel writing one value passes")
    return warnings
