"""Brute force of a pattern's (or template's) settings on one task's performance cases (GPU).

Each ``--case NAME[:FILTER]`` gets every setting of the kernel that satisfies FILTER (an
expression over the tunables and the case's variables, e.g. ``128 * WPR * ITEMS >= cols``), in a
share of ``--time-limit`` seconds, through one gate (one input draw, outputs checked, timed as the
loop times them; NVRTC compiling ahead).  The task's vendor baseline and, with ``--compare
FILE:DEFINES``, another kernel's setting are timed in the same gate.  Prints the best setting per
case with its time, % of the measured copy bandwidth and ratio to the baseline; writes
``sweep-<task>.json``:

    python bench/pattern_sweep.py --task matmul_f32 --pattern gemm_simt_warptile \\
        --case "large:BM * BN >= 8192 and TM * TN >= 32" --case "sq256:BM * BN <= 8192" --time-limit 100
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--task", required=True)
    ap.add_argument("--pattern", help="a library kernel's name, KIND/NAME or NAME (kernel_forge/kernels/index.json)")
    ap.add_argument("--kernel", help="or a kernel file with tunables")
    ap.add_argument("--case", action="append", default=[], help="NAME or NAME:FILTER (repeatable)")
    ap.add_argument("--weight", action="append", default=[], help="NAME=SHARE of the time limit (default equal)")
    ap.add_argument("--compare", action="append", default=[], help="FILE:K=V,K=V timed on every case too")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--compile-threads", type=int, default=8)
    args = ap.parse_args()

    from kernel_forge.common import expressions
    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate
    from kernel_forge.kernels.library import by_name
    from kernel_forge.model.task import load_task

    t_start = time.perf_counter()
    task = load_task(ROOT / "manifests" / f"{args.task}.json")
    path = by_name(args.pattern).path if args.pattern else Path(args.kernel)
    cand = load_candidate(path)
    specs = [(c.split(":", 1) + [""])[:2] for c in args.case] or [[c.name, ""] for c in task.cases_with("performance")]
    weights = {k: float(v) for k, v in (w.split("=", 1) for w in args.weight)}
    total_w = sum(weights.get(n, 1.0) for n, _ in specs)
    report: dict = {"task": task.name, "kernel": str(path.relative_to(ROOT)), "cases": {}, "baseline": {},
                    "compare": {}, "settings_total": len(cand.configurations())}
    with Gate(task, GateOptions.quick(compile_threads=args.compile_threads)) as gate:
        gate.ensure_gpu()
        for name in task.baselines:
            ev = gate.evaluate_baseline(name)
            report["baseline"][name] = {c.name: c.timing.median for c in ev.cases if c.timing}
            print(f"baseline {name}: {json.dumps(report['baseline'][name])}", flush=True)
        base = next(iter(report["baseline"].values()), {})
        for spec in args.compare:
            file, _, defs = spec.partition(":")
            d = {k: int(v) for k, v in (kv.split("=") for kv in defs.split(",") if kv)}
            other = load_candidate(ROOT / file).with_defines(d)
            for case, _ in specs:
                ev = gate.evaluate(other, roles=("performance",), only={case})
                cr = ev.case(case) if ev.passed else None
                report["compare"].setdefault(spec, {})[case] = cr.timing.median if cr else ev.reason
                print(f"compare {spec} on {case}: {report['compare'][spec][case]}", flush=True)
        for case, flt in specs:
            t_case = time.perf_counter()
            share = args.time_limit * weights.get(case, 1.0) / total_w
            vars_ = task.case(case).vars
            cfgs = [d for d in cand.configurations()
                    if not flt or bool(expressions.evaluate(flt, {**vars_, **d}))]
            cfgs.sort(key=lambda d: d != cand.defines)          # the declared default first
            cands = [cand.with_defines(d) for d in cfgs]
            gate.precompile(cands)
            rows = []
            for c in cands:
                if time.perf_counter() - t_case > share:
                    break
                ev = gate.evaluate(c, roles=("performance",), only={case})
                cr = ev.case(case) if ev.passed else None
                rows.append({"defines": dict(c.defines), "median_us": cr.timing.median if cr else None,
                             "pct_bw": cr.pct_peak_bw if cr else None, "reason": ev.reason})
            done = sorted((r for r in rows if r["median_us"]), key=lambda r: r["median_us"])
            best = done[0] if done else None
            ref = base.get(case)
            report["cases"][case] = {"filter": flt, "tried": len(rows), "of": len(cfgs), "passed": len(done),
                                     "failed": [r for r in rows if not r["median_us"]][:5], "best": best,
                                     "top5": done[:5], "vs_baseline": (ref / best["median_us"]) if best and ref else None,
                                     "seconds": round(time.perf_counter() - t_case, 1)}
            if best:
                pct = f", {best['pct_bw']:.1f}% of copy bandwidth" if best["pct_bw"] is not None else ""
                vs = f" = x{ref / best['median_us']:.3f} the baseline ({ref:.2f} us)" if ref else ""
                print(f"{task.name} {case}: best {best['median_us']:.2f} us{pct}{vs} with {best['defines']}; "
                      f"{len(done)}/{len(rows)} passed of {len(cfgs)} settings", flush=True)
            else:
                print(f"{task.name} {case}: no setting passed ({len(rows)} tried): {rows[:3]}", flush=True)
    report["seconds"] = round(time.perf_counter() - t_start, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sweep-{task.name}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
