"""``kforge eval``: one kernel through the gate on every case, beside the initial kernel and the
vendor baselines, measured in the same run."""
from __future__ import annotations

import time

from kernel_forge.common.errors import InputError
from kernel_forge.config.environment import check_environment
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.sections import check_settings
from kernel_forge.gate.gate import open_gate
from kernel_forge.gate.preflight import check_kernel, check_sizes, compile_kernel
from kernel_forge.model.candidate import Candidate, load_candidate
from kernel_forge.model.limits import launch_limits
from kernel_forge.model.task import Task, load_task
from kernel_forge.reports.evaluation_text import eval_json, eval_table


def default_gate(task, options: GateOptions):
    """The real gate, its GPU probed (raises NoGPUError without one): :func:`kernel_forge.gate.gate.open_gate`."""
    return open_gate(task, options)


def check_gate_settings(options: GateOptions) -> None:
    """Every gate setting within its declared bounds (named by its command-line option) and the
    timing environment the GPU worker reads, before the GPU probe."""
    check_settings(options)
    check_environment(timing=True)


def check_eval(task: Task, cand: Candidate, options: GateOptions, *, file: str | None = None) -> None:
    """Everything ``kforge eval`` can check before the GPU probe."""
    check_gate_settings(options)
    check_kernel(task, cand, file=file, limits=launch_limits(getattr(options, "arch", None)))
    check_sizes(task, gpu_bytes=None)
    if getattr(options, "arch", None):
        compile_kernel(cand, options.arch, file=file, headers=task.header_sources())


def run_eval(manifest, kernel, options: GateOptions, *, with_initial=True, with_baselines=True,
             with_holdout=True, progress=lambda msg: None, candidate: Candidate | None = None,
             gate_factory=default_gate):
    """Evaluate ``kernel`` (a path; or ``candidate``; default the task's initial kernel).  Every
    check that needs no GPU (options, static rules, entry point, signature, launch, sizes, an
    NVRTC compile when ``options.arch`` is set) runs before ``gate_factory(task, options)``
    makes the gate; tests and the MCP server pass their own factory."""
    from kernel_forge.authoring.acceptance import check_usable

    t0 = time.perf_counter()
    task = load_task(manifest)
    check_usable(task, progress)        # a model-written reference runs only once accepted: exit 2 here
    if candidate is None and kernel is None and task.initial is None:
        raise InputError(f"{task.path}: the task has no initial kernel, so give the KERNEL to evaluate",
                         hint=f"kforge eval {task.path} KERNEL.cu")
    cand = candidate or load_candidate(kernel or task.initial)
    check_eval(task, cand, options)
    roles = ("correctness", "performance") + (("holdout",) if with_holdout else ())
    gate = gate_factory(task, options)
    try:
        if hasattr(gate, "progress"):
            gate.progress = progress
        device = gate.device_info() or {}
        progress(f"[kforge] {task.name}: evaluating {cand.name} on {len(task.cases)} cases "
                 f"({device.get('name', '?')}, {options.arch or device.get('arch', '?')})")
        ev = gate.evaluate(cand, roles=roles)
        initial = None
        custom = kernel is not None or candidate is not None
        if with_initial and task.initial is None:
            initial = None          # no initial kernel to compare with
        elif with_initial and custom and load_candidate(task.initial).sha256 != cand.sha256:
            progress(f"[kforge] timing the initial kernel {task.initial.name} for comparison")
            initial = gate.evaluate(load_candidate(task.initial), roles=("performance",), kind="initial")
        elif with_initial:
            initial = ev
        baselines = {}
        if with_baselines:
            for name in task.baselines:
                progress(f"[kforge] timing baseline {name}")
                baselines[name] = gate.evaluate_baseline(name)
        result = eval_json(task, ev, initial, baselines, gate.device_info(), gate.calibrate(),
                           {k: v for k, v in vars(options).items()})
        result["wall_seconds"] = time.perf_counter() - t0
        table = eval_table(task, ev, initial if initial is not ev else None, baselines)
        table += f"\nwall time {result['wall_seconds']:.1f} s"
        return result, table
    finally:
        gate.close()
