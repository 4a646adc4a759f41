"""Where the strict gate's time goes on one task's largest performance case (GPU), by function.

For each task: (1) the worker side, ``CaseRunner.run`` of a timed draw in this process under
cProfile (inputs and expected values already resident, as for every candidate after the first);
(2) the size of its answer (an ``Observation``) through the pipe; (3) the gate side,
``Gate.evaluate`` of the initial kernel on the performance cases under cProfile (the worker's
time shows up there as waiting in ``_recv``).  Everything is warmed once before it is measured.
``bench/gate_cost.py`` gives the split per part without a profiler.

    python bench/profile_gate.py vector_add layernorm --out $OUT
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pickle
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def top(profile: cProfile.Profile, n: int = 22) -> str:
    s = io.StringIO()
    pstats.Stats(profile, stream=s).sort_stats("cumulative").print_stats(n)
    return s.getvalue()


def profile_task(name: str, report: list[str]) -> None:
    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.config.gate_settings import GateOptions, TimingOptions
    from kernel_forge.gate.gate import Gate
    from kernel_forge.gpu.runner import CaseRunner
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.reference_process import run_python_reference
    from kernel_forge.model.task import load_task
    from kernel_forge.model.worker_protocol import Expected, Load, RunPlan, Sample, resolve_launch

    task = load_task(ROOT / "manifests" / f"{name}.json")
    perf = [c for c in task.cases if c.role == "performance"]
    case = max(perf, key=lambda c: sum(v for v in c.vars.values() if isinstance(v, int)))
    cand = load_candidate(task.initial)
    gate = Gate(task, GateOptions(warmup=3, reps=30, arch="sm_90"))
    spec, _ = gate.prepare(cand)
    gate.close()

    runner = CaseRunner(task)
    launch = resolve_launch(spec.launch, case.vars, spec.defines)
    runner.load(Load(spec, [launch]))
    plan = RunPlan(case=case.name, seed=0, launch=launch, time=True, timing=TimingOptions(warmup=3, reps=30))
    expected = run_python_reference(task, generate(task, case, 0))
    need = lambda n: Expected(n.case, n.seed, expected)   # noqa: E731
    runner.run(spec, plan, need=need)
    runner.sample(Sample({}))
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    obs = runner.run(spec, plan, need=need)
    prof.disable()
    worker_s = time.perf_counter() - t0
    size = len(pickle.dumps(obs))
    report += [f"## {name}: case {case.name}", "",
               f"worker run (timed draw, in-process, inputs resident): {worker_s * 1e3:.1f} ms; answer {size} bytes; "
               f"parts: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in obs.seconds.items()), "",
               "```", top(prof), "```", ""]
    del obs, runner

    with Gate(task, GateOptions(warmup=3, reps=30)) as gate:
        gate.evaluate(cand, roles=("performance",))
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        ev = gate.evaluate(cand, roles=("performance",))
        prof.disable()
        report += [f"gate evaluate on the performance cases: {time.perf_counter() - t0:.3f} s "
                   f"(passed={ev.passed}); cost {ev.cost}", "", "```", top(prof, 30), "```", ""]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--out", type=Path, default=Path("."))
    a = ap.parse_args()
    report: list[str] = []
    for t in a.tasks:
        profile_task(t, report)
        print("\n".join(report[-6:]), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "profile-gate.md").write_text("\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
