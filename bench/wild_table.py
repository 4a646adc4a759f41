"""The wild corpus's table (issue 29): model-free ``kforge optimize`` (defaults) on every kernel of
bench/wild, beside the project's own expert version and the copy / compute roof (GPU).

Per kernel, in order:
  1. ``kforge optimize MANIFEST --time-limit T --archive off`` in a child process (every other
     option at its default; the archive off so that no kernel learns from the one before), its
     output streamed with the kernel's name in front; summary.json gives the initial kernel's
     and the best's per-case medians and their share of the measured copy bandwidth / compute
     peak;
  2. ``expert.cu``, where the project has one, gated once with the same task (``Gate.evaluate``:
     correctness and performance cases, the same timing and checks as every candidate).
A case's "% of roof" is the larger of its share of the measured copy bandwidth and of the
compute peak (the roofline's attainable time over the measured one), as ``--roof-stop`` reads it.

Written: ``wild_table.md`` (the table) and ``wild_table.json`` (every figure, the runs' folders).
The total is bounded: the kernels x (``--time-limit``, default 30 s, + the run's start, final
holdout and profile, about 10-15 s) + the expert gates, about 12 minutes for the fifteen.

    PYTHONPATH=$PWD python bench/wild_table.py --out $OUT/wild            # every kernel
    PYTHONPATH=$PWD python bench/wild_table.py --only llmc_softmax --time-limit 120
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WILD = ROOT / "bench" / "wild"
DEFAULT_TIME_LIMIT = 30.0
#: wall time a run may take beyond its --time-limit (worker start, final holdout, profile) before it is stopped
GRACE_S = 120.0


def entries(only: list[str] | None = None) -> list[Path]:
    """The corpus folders (each with one manifest), all of them or those named."""
    found = sorted(d for d in WILD.iterdir() if d.is_dir() and any(d.glob("*.json")))
    if only:
        missing = sorted(set(only) - {d.name for d in found})
        if missing:
            raise SystemExit(f"wild_table: no corpus kernel called {', '.join(missing)} (have: "
                             f"{', '.join(d.name for d in found)})")
        found = [d for d in found if d.name in only]
    return found


def manifest_of(d: Path) -> Path:
    return next(d.glob("*.json"))


def optimize_command(d: Path, runs_dir: Path, time_limit: float) -> list[str]:
    return [sys.executable, "-m", "kernel_forge", "optimize", str(manifest_of(d)), "--time-limit", f"{time_limit:g}",
            "--archive", "off", "--runs-dir", str(runs_dir)]


def roof_pct(case: dict) -> float | None:
    """A case's share of its roof: the larger of % of measured bandwidth and % of compute peak."""
    figs = [case.get(k) for k in ("pct_peak_bw", "pct_peak_flops") if isinstance(case.get(k), (int, float))]
    return max(figs) if figs else None


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def run_optimize(d: Path, runs_dir: Path, time_limit: float, progress) -> dict:
    """One model-free run; its summary's figures (or why there are none)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    before = set(runs_dir.glob("run-*"))
    cmd = optimize_command(d, runs_dir, time_limit)
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for line in proc.stdout:
            progress(f"[{d.name}] {line.rstrip()}")
            if time.perf_counter() - t0 > time_limit + GRACE_S:
                proc.kill()
                progress(f"[{d.name}] stopped: over --time-limit + {GRACE_S:g} s")
                break
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = -9
    wall = time.perf_counter() - t0
    new = sorted(set(runs_dir.glob("run-*")) - before)
    row = {"command": " ".join(cmd), "exit_code": rc, "wall_s": round(wall, 1), "run": str(new[-1]) if new else None}
    summary_path = new[-1] / "summary.json" if new else None
    if summary_path is None or not summary_path.is_file():
        row["error"] = f"no summary.json (exit {rc})"
        return row
    s = json.loads(summary_path.read_text())
    best, initial = s.get("best") or {}, s.get("initial") or {}
    perf = [c for c in best.get("per_case", []) if c.get("median_us")]
    row.update(stop_reason=s.get("stop_reason"), gated=s.get("gated"), best_id=best.get("id"),
               best_label=best.get("label"), speedup=best.get("speedup_vs_initial"),
               best_us=geomean([c["median_us"] for c in perf]),
               initial_us=initial.get("score_us") if isinstance(initial, dict) else None,
               per_case={c["case"]: {"median_us": c.get("median_us"), "roof_pct": roof_pct(c),
                                     "pct_peak_bw": c.get("pct_peak_bw"), "pct_peak_flops": c.get("pct_peak_flops")}
                         for c in perf})
    roofs = [v["roof_pct"] for v in row["per_case"].values() if v["roof_pct"] is not None]
    row["roof_pct"] = min(roofs) if roofs else None           # the worst performance case
    return row


def run_expert(d: Path) -> dict | None:
    """The project's expert version gated once on the task's correctness and performance cases."""
    if not (d / "expert.cu").is_file():
        return None
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate
    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.model.task import load_task

    task = load_task(manifest_of(d))
    with Gate(task, GateOptions()) as gate:
        ev = gate.evaluate(load_candidate(d / "expert.cu"), roles=("correctness", "performance"))
    cases = {c.name: {"median_us": c.timing.median if c.timing else None,
                      "roof_pct": roof_pct({"pct_peak_bw": c.pct_peak_bw, "pct_peak_flops": c.pct_peak_flops})}
             for c in ev.cases if c.role == "performance"}
    roofs = [v["roof_pct"] for v in cases.values() if v["roof_pct"] is not None]
    return {"passed": ev.passed, "reason": ev.reason, "message": ev.message[:300], "score_us": ev.score_us,
            "per_case": cases, "roof_pct": min(roofs) if roofs else None}


def _f(x, fmt="{:.1f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "-"


def table(rows: list[dict]) -> str:
    out = ["| kernel | initial (µs) | model-free best (µs) | ×initial | % of roof | stop | expert (µs) | expert % of roof "
           "| model-free ÷ expert |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        o, e = r.get("optimize") or {}, r.get("expert")
        if e is None:
            exp, exp_roof, vs = "none", "-", "-"
        elif not e["passed"]:
            exp, exp_roof, vs = f"fails: {e['reason']}", "-", "-"
        else:
            exp, exp_roof = _f(e["score_us"], "{:.2f}"), _f(e["roof_pct"])
            vs = (f"{e['score_us'] / o['best_us']:.2f}× faster" if o.get("best_us") and e["score_us"] else "-")
        stop = (o.get("stop_reason") or o.get("error") or "-").split(":")[0]
        out.append(f"| {r['name']} | {_f(o.get('initial_us'), '{:.2f}')} | {_f(o.get('best_us'), '{:.2f}')} "
                   f"| {_f(o.get('speedup'), '{:.2f}')} | {_f(o.get('roof_pct'))} | {stop} | {exp} | {exp_roof} | {vs} |")
    return "\n".join(out + ["", "- µs: geometric mean over the performance cases (the score); % of roof: the worst "
                                "performance case's larger share of measured copy bandwidth or compute peak",
                            "- model-free ÷ expert: how many times faster the model-free best is than the project's "
                            "own expert version (below 1: slower)"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("wild"), help="folder for wild_table.md/.json and the runs")
    ap.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT,
                    help=f"kforge optimize --time-limit per kernel, seconds (default {DEFAULT_TIME_LIMIT:g})")
    ap.add_argument("--only", nargs="+", help="corpus kernels to run (folder names under bench/wild)")
    ap.add_argument("--no-expert", action="store_true", help="do not gate the experts' versions")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and the time bound, run nothing")
    args = ap.parse_args(argv)

    todo = entries(args.only)
    bound = len(todo) * (args.time_limit + 12) + (0 if args.no_expert else 10 * sum((d / "expert.cu").is_file()
                                                                                   for d in todo))
    print(f"[wild] {len(todo)} kernels, --time-limit {args.time_limit:g} s each: about {bound / 60:.1f} minutes",
          flush=True)
    if args.dry_run:
        for d in todo:
            print(" ".join(optimize_command(d, args.out / "runs", args.time_limit)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    started = time.perf_counter()
    for i, d in enumerate(todo, 1):
        print(f"[wild] {i}/{len(todo)} {d.name}: model-free optimize ...", flush=True)
        row = {"name": d.name, "optimize": run_optimize(d, args.out / "runs", args.time_limit,
                                                        lambda m: print(m, flush=True))}
        if not args.no_expert and (d / "expert.cu").is_file():
            print(f"[wild] {i}/{len(todo)} {d.name}: the project's expert version ...", flush=True)
            try:
                row["expert"] = run_expert(d)
            except Exception as exc:  # noqa: BLE001 - one kernel's failure must not lose the table
                row["expert"] = {"passed": False, "reason": "harness", "message": f"{type(exc).__name__}: {exc}"[:300],
                                 "score_us": None, "per_case": {}, "roof_pct": None}
        else:
            row["expert"] = None
        rows.append(row)
        o = row["optimize"]
        print(f"[wild] {d.name}: x{_f(o.get('speedup'), '{:.2f}')} vs initial, {_f(o.get('roof_pct'))} % of roof, "
              f"{o.get('stop_reason') or o.get('error')}; {time.perf_counter() - started:.0f} s so far", flush=True)
        (args.out / "wild_table.json").write_text(json.dumps({"time_limit_s": args.time_limit, "rows": rows}, indent=1))
    text = table(rows)
    (args.out / "wild_table.md").write_text(text + "\n")
    (args.out / "wild_table.json").write_text(json.dumps({"time_limit_s": args.time_limit, "rows": rows,
                                                          "wall_s": time.perf_counter() - started, "table": text},
                                                         indent=1))
    print(text)
    print(f"[wild] wrote {args.out / 'wild_table.md'} and wild_table.json ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
