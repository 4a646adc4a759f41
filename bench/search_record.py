"""Record the gate's verdict on EVERY valid setting of every template of every bundled task (GPU).

Brute force through the real gate, one worker, one task after another: the initial kernel, the
vendor baselines, then each template's valid settings (constraints applied), compiled ahead
(``Gate.precompile``) and gated on the correctness, performance and holdout cases.  What the
offline search benchmark (``bench/search_sim.py``) replays comes from here, so the strategies
are compared on a complete, fresh recording.  Written after every task (a timeout keeps the
tasks done): ``OUT/search-recording.json.gz``, format ``kforge-search-recording/1``::

    {"format": ..., "created": ..., "device": {...}, "calibration": {...}, "options": {...},
     "complete": bool, "seconds": float,
     "tasks": {"matmul_f32": {
        "manifest": "manifests/matmul_f32.json", "performance": ["sq256", ...],
        "initial": RESULT, "baselines": {"cublas": RESULT},
        "templates": {"matmul_f32_regblock.cu": {"sha256": ..., "tunables": {...}, "settings": 68,
                                                 "complete": true, "results": [RESULT + "defines", ...]}}}}}

    RESULT = {"passed", "reason", "message", "score_us", "seconds",
              "cases": {name: {"median", "p20", "p80", "n"}}, "holdout": bool | None, "registers", "spills"}

    python bench/search_record.py --out OUT [--tasks matmul_f32,...] [--quick] [--time-limit 220]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FORMAT = "kforge-search-recording/1"
#: most important first: a time limit cuts the tail
ORDER = ["matmul_f32", "layernorm", "softmax_rows", "transpose", "reduce_sum", "vector_add", "histogram", "gelu_bf16"]


def result_of(ev) -> dict:
    cases = {}
    res = {}
    for c in ev.cases:
        if c.role == "performance" and c.timing is not None:
            t = c.timing
            cases[c.name] = {"median": t.median, "p20": t.p20, "p80": t.p80, "n": len(t.samples_us)}
        if c.resources and not res:
            res = c.resources
    hold = [c for c in ev.cases if c.role == "holdout"]
    return {"passed": ev.passed, "reason": ev.reason, "message": (ev.message or "")[:300], "score_us": ev.score_us,
            "seconds": round(ev.seconds or 0.0, 4), "cases": cases,
            "holdout": (all(c.passed for c in hold) if hold else None),
            "registers": res.get("registers"), "spills": (res.get("spill_stores") or 0) + (res.get("spill_loads") or 0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: every bundled task)")
    ap.add_argument("--quick", action="store_true", help="one input draw, no repeat-launch or post-timing checks")
    ap.add_argument("--time-limit", type=float, default=220.0, help="stop gating new settings after this many seconds")
    ap.add_argument("--list", action="store_true", help="print the settings per template and exit (no GPU)")
    args = ap.parse_args()

    from kernel_forge.model.candidate import load_candidate, parse_candidate
    from kernel_forge.model.task import load_task

    names = [t for t in args.tasks.split(",") if t] or \
        sorted((p.stem for p in (ROOT / "manifests").glob("*.json")), key=lambda n: (ORDER + [n]).index(n))
    tasks = [load_task(ROOT / "manifests" / f"{n}.json") for n in names]
    plan = {t.name: {tp.name: len(load_candidate(tp).configurations()) for tp in t.templates} for t in tasks}
    total = sum(sum(v.values()) for v in plan.values())
    print(f"[record] {total} settings in {len(tasks)} tasks: {json.dumps(plan)}", flush=True)
    if args.list:
        return 0

    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate

    opts = GateOptions.quick() if args.quick else GateOptions()
    rec = record(tasks, lambda task: Gate(task, opts), Path(args.out) / "search-recording.json.gz",
                 time_limit=args.time_limit, options={"quick": args.quick, "time_limit_s": args.time_limit})
    return 0 if rec["tasks"] else 1


def record(tasks, make_gate, path: Path, *, time_limit: float = 220.0, options: dict | None = None,
           progress=lambda m: print(m, flush=True)) -> dict:
    """Gate every valid setting of every template of ``tasks`` through ``make_gate(task)`` (a
    GateLike; closed after its task) and write the recording to ``path`` after each task."""
    from kernel_forge.model.candidate import load_candidate, parse_candidate

    path.parent.mkdir(parents=True, exist_ok=True)
    total = sum(len(load_candidate(tp).configurations()) for t in tasks for tp in t.templates)
    rec = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": None,
           "calibration": None, "options": options or {}, "complete": False, "seconds": 0.0, "tasks": {}}
    t0 = time.monotonic()
    up = lambda: time.monotonic() - t0 > time_limit  # noqa: E731
    done = 0

    def save():
        rec["seconds"] = round(time.monotonic() - t0, 2)
        tmp = path.with_name(path.name + ".tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump(rec, f)
        tmp.replace(path)

    for task in tasks:
        if up():
            progress(f"[record] time limit: {task.name} not started")
            continue
        try:
            where = str(task.path.relative_to(ROOT))
        except ValueError:
            where = str(task.path)
        entry = {"manifest": where, "performance": [c.name for c in task.cases_with("performance")],
                 "initial": None, "baselines": {}, "templates": {}}
        rec["tasks"][task.name] = entry
        try:
            gate = make_gate(task)
        except Exception as exc:  # noqa: BLE001 - one task's gate that cannot start must not lose the others
            entry["error"] = f"{type(exc).__name__}: {exc}"
            progress(f"[record] {task.name}: no gate: {entry['error']}")
            continue
        try:
            if hasattr(gate, "ensure_gpu"):
                gate.ensure_gpu()
            rec["device"], rec["calibration"] = gate.device_info(), gate.calibrate()
            roles = ("correctness", "performance", "holdout")
            entry["initial"] = result_of(gate.evaluate(load_candidate(task.initial), roles=roles))
            for b in task.baselines:
                entry["baselines"][b] = result_of(gate.evaluate_baseline(b))
            for tp in task.templates:
                text = tp.read_text(encoding="utf-8")
                cand = parse_candidate(text, name=tp.name)
                configs = cand.configurations()
                tpl = {"sha256": hashlib.sha256(text.encode()).hexdigest(),
                       "tunables": {k: list(v) for k, v in cand.tunables.items()}, "settings": len(configs),
                       "complete": False, "results": []}
                entry["templates"][tp.name] = tpl
                cands = [replace(cand.with_defines(d), name=f"{tp.stem}-{i:04d}.cu") for i, d in enumerate(configs)]
                gate.precompile(cands)
                s = time.monotonic()

                def on_result(i, ev, tpl=tpl, configs=configs):
                    tpl["results"].append({"defines": configs[i], **result_of(ev)})

                gate.evaluate_many(cands, roles=roles, should_stop=up, on_result=on_result)
                tpl["complete"] = len(tpl["results"]) == len(configs)
                done += len(tpl["results"])
                ok = sum(r["passed"] for r in tpl["results"])
                progress(f"[record] {task.name} {tp.name}: {len(tpl['results'])}/{len(configs)} settings gated "
                         f"({ok} passed) in {time.monotonic() - s:.1f} s; {done}/{total} in {time.monotonic() - t0:.0f} s")
        except Exception as exc:  # noqa: BLE001 - record what failed, keep what was gated, go on
            entry["error"] = f"{type(exc).__name__}: {exc}"
            progress(f"[record] {task.name}: stopped by {entry['error']}")
        finally:
            gate.close()
        save()
    rec["complete"] = len(rec["tasks"]) == len(tasks) and not any("error" in e for e in rec["tasks"].values()) \
        and all(t["complete"] for e in rec["tasks"].values() for t in e["templates"].values())
    save()
    progress(f"[record] {'complete' if rec['complete'] else 'INCOMPLETE'}: {done}/{total} settings in "
             f"{time.monotonic() - t0:.0f} s -> {path}")
    return rec


if __name__ == "__main__":
    sys.exit(main())
