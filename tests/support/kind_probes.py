"""A kind probe built by hand: a task's case with given input values and what its reference wrote,
for testing the hypotheses of kernel_forge/kinds without running a reference."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from kernel_forge.kinds.probe import Probe
from kernel_forge.model.inputs import CaseInputs
from kernel_forge.model.task import Case, load_task


def probe(path: Path, values: dict, outputs: dict, **vars) -> Probe:
    """The probe of the task at ``path`` on a case with ``vars``: ``values`` its inputs (pure outputs: NaN),
    ``outputs`` what the reference wrote."""
    task = load_task(path)
    case = Case("probe", "correctness", vars, 0)
    scalars = {a.name: task.scalar(a, case) for a in task.args if not a.is_buffer}
    sizes = {a.name: math.prod(task.shape(a, case)) for a in task.args if a.is_buffer}
    flat = {n: np.asarray(values[n], dtype=np.float64).reshape(-1) if n in values else np.full(s, np.nan)
            for n, s in sizes.items()}
    return Probe(task=task, inputs=CaseInputs(case, 0, {}, scalars), values=flat, scalars=scalars,
                 outputs={n: np.asarray(v, dtype=np.float64).reshape(-1) for n, v in outputs.items()}, sizes=sizes)
