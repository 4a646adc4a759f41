"""A CUDA reference's expected outputs: its kernel run once on (case, seed) in a worker of its own,
through the same load and run as a candidate, the values sent back to the parent."""
from __future__ import annotations

import numpy as np

from kernel_forge.common.dtypes import to_float
from kernel_forge.model.task import Case, Task
from kernel_forge.model.worker_protocol import FIRST, LOAD, RUN, KernelSpec, Load, Observation, ResolvedLaunch, Run, RunPlan

__all__ = ["reference_run"]


def reference_run(worker, task: Task, spec: KernelSpec, case: Case, seed: int, launch: ResolvedLaunch,
                  first_timeout: float) -> dict[str, np.ndarray]:
    """The reference kernel's outputs on (case, seed), bf16 as float, from ``worker`` (a
    :class:`~kernel_forge.gate.worker.Worker` of the reference's own; raises WorkerError)."""
    timeouts = dict(first_timeout=first_timeout, rest_timeout=60, what="running the CUDA reference")
    worker.request(LOAD, Load(spec, [launch]), **timeouts)
    plan = RunPlan(case=case.name, seed=seed, launch=launch, repeat=False, time=False, compare="cpu", keep=False)
    obs: Observation = worker.request(RUN, Run(spec, plan), **timeouts)
    stage = obs.stage(FIRST)
    out = {}
    for arg in task.outputs:
        values = stage.arrays[arg.name]
        out[arg.name] = to_float(values, arg.param.dtype) if arg.param.dtype.name == "bfloat16" else values
    return out
