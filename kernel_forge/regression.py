"""The CI regression gate: approved kernels must stay correct and not get slower.

An approvals file (``approved.json``) lists, per task, a kernel file, its speedup over the
task's initial kernel when it was approved, and an allowed slowdown.  ``kforge gate`` re-runs
each approved kernel through the full gate (holdout cases included), then times it side by side
with the initial kernel on the same GPU: the ratio, not an absolute time, is compared, so the
check holds on any CI runner's GPU.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from .candidate import load_candidate
from .errors import InputError
from .evidence import atomic_write
from .gate import Gate, GateOptions
from .task import load_task


def _rel(path: Path, base: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), base.resolve())
    except ValueError:  # another drive on Windows
        return str(path.resolve())


def load_approvals(path: str | Path) -> dict:
    p = Path(path)
    if not p.exists():
        return {"approved": []}
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("approved"), list):
        raise InputError(f"{p}: expected {{\"approved\": [...]}}")
    for i, e in enumerate(data["approved"]):
        for k in ("task", "manifest", "kernel", "speedup_vs_initial", "tolerance", "sha256"):
            if k not in e:
                raise InputError(f"{p}: $.approved[{i}] lacks {k!r}")
    return data


def approve_run(run_path, approvals_path, copy_to, tolerance: float) -> dict:
    run = Path(run_path)
    try:
        summary = json.loads((run / "summary.json").read_text())
        meta = json.loads((run / "run.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{run}: no readable summary.json/run.json ({exc}); finish or resume the run first") from None
    best = summary.get("best")
    if not best or not (run / "best.cu").is_file():
        raise InputError(f"{run}: the run has no best kernel")
    if best.get("holdout") is not None and not best["holdout"].get("passed", True):
        raise InputError(f"{run}: the best kernel failed the final holdout check; it cannot be approved")
    if not 0 <= tolerance < 1:
        raise InputError("--tolerance must be in [0, 1)")
    ap = Path(approvals_path)
    dest_dir = Path(copy_to)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{summary['task']}.cu"
    shutil.copyfile(run / "best.cu", dest)
    entry = {"task": summary["task"], "manifest": _rel(Path(meta["manifest"]), ap.parent),
             "kernel": _rel(dest, ap.parent), "sha256": hashlib.sha256(dest.read_bytes()).hexdigest(),
             "speedup_vs_initial": best["speedup_vs_initial"], "score_us": best["score_us"],
             "tolerance": tolerance, "from_run": run.name,
             "device": (json.loads((run / "env.json").read_text()).get("device") or {}).get("name")
             if (run / "env.json").is_file() else None}
    data = load_approvals(ap)
    data["approved"] = [e for e in data["approved"] if e["task"] != entry["task"]] + [entry]
    atomic_write(ap, (json.dumps(data, indent=2) + "\n").encode())
    return entry


def run_regression(approvals_path, options: GateOptions, progress=lambda m: None) -> list[dict]:
    ap = Path(approvals_path)
    data = load_approvals(ap)
    if not data["approved"]:
        raise InputError(f"{ap}: no approved kernels")
    results = []
    for e in data["approved"]:
        kernel = (ap.parent / e["kernel"]).resolve()
        task = load_task((ap.parent / e["manifest"]).resolve())
        row = {"task": e["task"], "kernel": e["kernel"], "ok": False, "approved_speedup": e["speedup_vs_initial"]}
        if not kernel.is_file():
            row["detail"] = f"approved kernel {kernel} is missing"
            results.append(row)
            continue
        if hashlib.sha256(kernel.read_bytes()).hexdigest() != e["sha256"]:
            row["detail"] = "the kernel file changed since it was approved (approve it again)"
            results.append(row)
            continue
        progress(f"[kforge gate] {e['task']}: checking {e['kernel']}")
        with Gate(task, options) as gate:
            gate.ensure_gpu()
            cand = load_candidate(kernel)
            ev = gate.evaluate(cand, roles=("correctness", "performance", "holdout"))
            row["verdict"] = ev.reason
            if not ev.passed:
                row["detail"] = f"WRONG: {ev.reason}: {ev.message}"
                results.append(row)
                continue
            init_ev, cand_ev = gate.retime([load_candidate(task.initial), cand], rounds=2)
            if not (init_ev.passed and cand_ev.passed):
                row["detail"] = f"re-measurement failed: {init_ev.reason}/{cand_ev.reason}"
                results.append(row)
                continue
            speedup = init_ev.score_us / cand_ev.score_us
            floor = e["speedup_vs_initial"] * (1 - e["tolerance"])
            row.update(speedup=speedup, floor=floor, score_us=cand_ev.score_us, initial_us=init_ev.score_us)
            row["ok"] = speedup >= floor
            row["detail"] = (f"x{speedup:.2f} vs initial (approved x{e['speedup_vs_initial']:.2f}, "
                             f"floor x{floor:.2f})" + ("" if row["ok"] else ": SLOWER"))
        results.append(row)
    return results
