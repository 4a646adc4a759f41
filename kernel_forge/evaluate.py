"""``kforge eval``: one kernel through the gate on every case, beside the initial kernel and the
vendor baselines, measured in the same run."""
from __future__ import annotations

import time

from .candidate import load_candidate
from .gate import Gate, GateOptions
from .report import eval_json, eval_table
from .task import load_task


def run_eval(manifest, kernel, options: GateOptions, *, with_initial=True, with_baselines=True,
             with_holdout=True, progress=lambda msg: None):
    t0 = time.perf_counter()
    task = load_task(manifest)
    cand = load_candidate(kernel or task.initial)
    roles = ("correctness", "performance") + (("holdout",) if with_holdout else ())
    with Gate(task, options) as gate:
        gate.progress = progress
        gate.ensure_gpu()
        progress(f"[kforge] {task.name}: evaluating {cand.name} on {len(task.cases)} cases "
                 f"({gate.device['name']}, {gate.arch})")
        ev = gate.evaluate(cand, roles=roles)
        initial = None
        if with_initial and kernel and load_candidate(task.initial).sha256 != cand.sha256:
            progress(f"[kforge] timing the initial kernel {task.initial.name} for comparison")
            initial = gate.evaluate(load_candidate(task.initial), roles=("performance",), kind="initial")
        elif with_initial:
            initial = ev
        baselines = {}
        if with_baselines:
            for name in task.baselines:
                progress(f"[kforge] timing baseline {name}")
                baselines[name] = gate.evaluate_baseline(name)
        result = eval_json(task, ev, initial, baselines, gate.device, gate.calibration,
                           {k: v for k, v in vars(options).items()})
        result["wall_seconds"] = time.perf_counter() - t0
        table = eval_table(task, ev, initial if initial is not ev else None, baselines)
        table += f"\nwall time {result['wall_seconds']:.1f} s"
        return result, table
