"""Where the strict gate's time goes on one task's largest performance case (GPU).

For each task: (1) the worker side, ``CaseRunner.run_case`` in this process under cProfile;
(2) the cost of sending its answer through a pipe to another process; (3) the gate side,
``Gate.evaluate`` of the initial kernel on the performance cases under cProfile (the worker's
time shows up there as waiting in ``_recv``). Everything is warmed once before it is measured.

    python bench/profile_gate.py vector_add layernorm --out $OUT
"""
from __future__ import annotations

import argparse
import cProfile
import io
import multiprocessing as mp
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


def _sink(conn) -> None:
    got = conn.recv()
    arrays = {id(v): v for stage in got.values() if isinstance(stage, dict)
              for v in stage.values() if hasattr(v, "nbytes")}
    conn.send(sum(v.nbytes for v in arrays.values()))      # an array sent for several stages counts once


def pipe_seconds(out: dict) -> tuple[float, int]:
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=_sink, args=(b,))
    p.start()
    time.sleep(2.0)                      # let the child start before the clock runs
    t0 = time.perf_counter()
    a.send(out)
    nbytes = a.recv()
    dt = time.perf_counter() - t0
    p.join()
    return dt, nbytes


def profile_task(name: str, report: list[str]) -> None:
    from kernel_forge.candidate import load_candidate
    from kernel_forge.gate import Gate, GateOptions
    from kernel_forge.gpu.runner import CaseRunner, RunOptions
    from kernel_forge.task import load_task

    task = load_task(ROOT / "manifests" / f"{name}.json")
    perf = [c for c in task.cases if c.role == "performance"]
    case = max(perf, key=lambda c: sum(v for v in c.vars.values() if isinstance(v, int)))
    cand = load_candidate(task.initial)
    gate = Gate(task, GateOptions(warmup=3, reps=30, arch="sm_90"))
    spec, _ = gate.prepare(cand)
    gate.close()

    runner = CaseRunner(task)
    opts = RunOptions(seed=0, time=True, warmup=3, reps=30)
    runner.run_case(spec, case.name, opts)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    out = runner.run_case(spec, case.name, opts)
    prof.disable()
    worker_s = time.perf_counter() - t0
    send_s, nbytes = pipe_seconds(out)
    report += [f"## {name}: case {case.name}", "",
               f"worker run_case (timed draw, in-process): {worker_s:.2f} s; answer {nbytes / 1e6:.0f} MB "
               f"through a pipe: {send_s:.2f} s", "", "```", top(prof), "```", ""]
    del out, runner

    with Gate(task, GateOptions(warmup=3, reps=30)) as gate:
        gate.evaluate(cand, roles=("performance",))
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        ev = gate.evaluate(cand, roles=("performance",))
        prof.disable()
        report += [f"gate evaluate on the performance cases: {time.perf_counter() - t0:.2f} s "
                   f"(passed={ev.passed})", "", "```", top(prof, 30), "```", ""]


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
