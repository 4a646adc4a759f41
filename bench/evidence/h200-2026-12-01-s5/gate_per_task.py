"""Gate seconds per candidate on every bundled task (GPU), for one version of the package.

Each task gets its initial kernel plus up to --per-template settings of each tuning template,
every one a cold compile (a fresh compile cache), through one full gate (default options, as
`kforge optimize` uses them).  The first evaluation (it starts the worker) is reported apart.
Run it once per package version, on the same machine, to compare before and after:

    python bench/evidence/h200-2026-12-01-s5/gate_per_task.py --out OUT --label after
    python bench/evidence/h200-2026-12-01-s5/gate_per_task.py --out OUT --label before --package-root .prev   # an older checkout
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]     # the repository (this script sits beside its evidence)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--label", default="current")
    ap.add_argument("--package-root", default=str(ROOT), help="folder holding the kernel_forge package to measure")
    ap.add_argument("--tasks", default="")
    ap.add_argument("--per-template", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.package_root).resolve()))
    os.environ["KFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kforge-cold-")
    from kernel_forge.model.candidate import load_candidate, parse_candidate
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate
    from kernel_forge.model.task import load_task

    names = [t for t in args.tasks.split(",") if t] or sorted(p.stem for p in (ROOT / "manifests").glob("*.json"))
    report = {"label": args.label, "package": str(Path(args.package_root).resolve()), "tasks": {}}
    for name in names:
        task = load_task(ROOT / "manifests" / f"{name}.json")
        cands = [load_candidate(task.initial)]
        for tpl in task.templates:
            c = parse_candidate(tpl.read_text(encoding="utf-8"), name=tpl.name)
            for d in c.configurations()[: args.per_template]:
                cands.append(c.with_defines(d))
        times, verdicts = [], []
        t_first = None
        with Gate(task, GateOptions()) as gate:
            gate.ensure_gpu()
            for i, cand in enumerate(cands):
                t0 = time.perf_counter()
                ev = gate.evaluate(cand)
                dt = time.perf_counter() - t0
                verdicts.append(ev.reason)
                if i == 0:
                    t_first = dt
                else:
                    times.append(dt)
        row = {"candidates": len(cands), "first_s": round(t_first, 3),
               "median_s": round(statistics.median(times), 4) if times else None,
               "mean_s": round(statistics.mean(times), 4) if times else None, "verdicts": verdicts}
        report["tasks"][name] = row
        print(f"[{args.label}] {name}: {json.dumps(row)}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"gate_per_task-{args.label}.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
