"""--quick against the full gate, side by side, on every bundled initial kernel and template (GPU).

Issue 19: --quick did not poison outputs before timed launches, so a kernel that skips work when
its output already holds the answer timed faster under --quick (23.5 vs 32.7 ms on 4096^3).  Now
both modes poison before every timed launch, so on honest kernels their scores must agree within
the noise band.  For each task: one full gate (``GateOptions()``) and one quick gate
(``GateOptions.quick()``), each kernel evaluated ``--rounds`` times in each, alternating
(full, quick, full, quick, ...); the score is the median over rounds.

The noise band of a kernel: the larger of 1 %, twice the largest relative 95 % half-width of a
performance case's median (``stats.median_noise``) in either mode, and the spread of the scores
over rounds within a mode.  "agrees" when |quick - full| / full is within it.

    PYTHONPATH=$PWD python bench/quick_vs_full.py --out DIR [--tasks vector_add,matmul_f32] [--rounds 2]

Writes DIR/quick_vs_full.json and DIR/quick_vs_full.md (the table, also printed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def kernels_of(task) -> list[tuple[str, Path]]:
    return [("initial", Path(task.initial))] + [(Path(t).stem, Path(t)) for t in task.templates]


def case_noise(ev) -> float:
    from kernel_forge.common.stats import median_noise

    worst = 0.0
    for c in ev.cases:
        if c.role == "performance" and c.timing is not None:
            worst = max(worst, median_noise(c.timing.samples_us))
    return worst


def band(full: list, quick: list, noises: list[float]) -> float:
    spreads = []
    for scores in (full, quick):
        if len(scores) > 1:
            spreads.append((max(scores) - min(scores)) / statistics.median(scores))
    finite = [x for x in noises if x < float("inf")]
    return max([0.01, 2 * max(finite, default=0.0)] + spreads)


def compare_task(task, rounds: int, progress) -> list[dict]:
    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate

    rows = []
    with Gate(task, GateOptions()) as full, Gate(task, GateOptions.quick()) as quick:
        for label, path in kernels_of(task):
            cand = load_candidate(path)
            got = {"full": [], "quick": []}
            noises, failures = [], []
            for _ in range(rounds):
                for mode, gate in (("full", full), ("quick", quick)):
                    t0 = time.perf_counter()
                    ev = gate.evaluate(cand, roles=("correctness", "performance"))
                    if not ev.passed or not ev.score_us:
                        failures.append(f"{mode}: {ev.reason}: {ev.message[:200]}")
                        continue
                    got[mode].append(ev.score_us)
                    noises.append(case_noise(ev))
                    progress(f"{task.name}/{label} {mode}: {ev.score_us:.2f} us ({time.perf_counter() - t0:.1f} s)")
            row = {"task": task.name, "kernel": label, "full_us": None, "quick_us": None, "ratio": None,
                   "band": None, "agrees": False, "failures": failures,
                   "full_scores": got["full"], "quick_scores": got["quick"]}
            if got["full"] and got["quick"]:
                f, q = statistics.median(got["full"]), statistics.median(got["quick"])
                b = band(got["full"], got["quick"], noises)
                row.update(full_us=f, quick_us=q, ratio=q / f, band=b, agrees=abs(q - f) / f <= b and not failures)
            rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| task | kernel | full gate µs | --quick µs | quick / full | noise band | agrees |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["ratio"] is None:
            lines.append(f"| {r['task']} | {r['kernel']} | - | - | - | - | no: {'; '.join(r['failures'])[:120]} |")
            continue
        lines.append(f"| {r['task']} | {r['kernel']} | {r['full_us']:.2f} | {r['quick_us']:.2f} | {r['ratio']:.4f} | "
                     f"±{100 * r['band']:.1f} % | {'yes' if r['agrees'] else 'NO'} |")
    agree = sum(r["agrees"] for r in rows)
    lines.append("")
    lines.append(f"{agree} of {len(rows)} kernels agree within their noise band.")
    return "\n".join(lines)


def main() -> int:
    from kernel_forge.model.task import load_task

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: every bundled task)")
    ap.add_argument("--rounds", type=int, default=2, help="evaluations per kernel and mode")
    a = ap.parse_args()
    names = [t for t in a.tasks.split(",") if t] or sorted(p.stem for p in (ROOT / "manifests").glob("*.json"))
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.perf_counter()

    def write(done: bool) -> str:
        text = table(rows) + ("" if done else f"\n\n(partial: {len({r['task'] for r in rows})} of {len(names)} tasks so far)")
        (a.out / "quick_vs_full.md").write_text("# --quick vs the full gate (bench/quick_vs_full.py)\n\n" + text + "\n")
        (a.out / "quick_vs_full.json").write_text(json.dumps({"rows": rows, "rounds": a.rounds, "complete": done,
                                                              "seconds": round(time.perf_counter() - t0, 1)}, indent=1))
        return text

    for name in names:
        rows += compare_task(load_task(ROOT / "manifests" / f"{name}.json"), max(1, a.rounds),
                             lambda line: print(f"[quick-vs-full] {line}", flush=True))
        write(False)            # what is done so far survives a timeout
    print(write(True))
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
