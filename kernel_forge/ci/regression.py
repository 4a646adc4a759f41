"""The CI regression gate: approved kernels must stay correct and not get slower.

An approvals file (``approved.json``) lists, per task, a kernel file, its speedup over the
task's initial kernel when it was approved, and an allowed slowdown.  ``kforge gate`` re-runs
each approved kernel through the full gate (holdout cases included), then times it side by side
with the initial kernel on the same GPU: the ratio, not an absolute time, is compared, so the
check holds on any CI runner's GPU.

``kforge approve`` checks everything first and writes last: the approvals file must be readable
and valid, the run finished with a best kernel that passed its final holdout check, and the
copy may replace only an earlier approved copy of the same task (never a task's own files, nor
any other file).  What it replaces is kept as ``NAME.bak`` beside it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import queue
import threading
import time
from pathlib import Path

from kernel_forge.gate import preflight
from kernel_forge.model.candidate import load_candidate
from kernel_forge.common.errors import InputError, KForgeError
from kernel_forge.common.json_path import json_path
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.common.reads import read_json_file
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.model.task import Task, load_task
from kernel_forge.common.writes import write_files

ENTRY_KEYS = {"task": str, "manifest": str, "kernel": str, "speedup_vs_initial": (int, float),
              "tolerance": (int, float), "sha256": str}


def _rel(path: Path, base: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), base.resolve())
    except ValueError:  # another drive on Windows
        return str(path.resolve())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_approvals(path: str | Path) -> dict:
    """The approvals file (an empty list when it does not exist yet); any problem is an
    InputError naming the file and JSON path."""
    p = Path(path)
    if not p.exists():
        return {"approved": []}
    if not p.is_file():
        raise InputError(f"{p}: is not a file")
    data = read_json_file(p, "approvals file")
    if not isinstance(data, dict) or not isinstance(data.get("approved"), list):
        raise InputError(f"{p}: $: expected {{\"approved\": [...]}}")
    for i, e in enumerate(data["approved"]):
        if not isinstance(e, dict):
            raise InputError(f"{p}: {json_path('approved', i)}: expected an object")
        for k, types in ENTRY_KEYS.items():
            if k not in e:
                raise InputError(f"{p}: {json_path('approved', i)} lacks {k!r}")
            v = e[k]
            if not isinstance(v, types) or isinstance(v, bool):
                raise InputError(f"{p}: {json_path('approved', i, k)}: expected {'text' if types is str else 'a number'}, "
                                 f"got {v!r}")
        if not (math.isfinite(e["speedup_vs_initial"]) and e["speedup_vs_initial"] > 0):
            raise InputError(f"{p}: {json_path('approved', i, 'speedup_vs_initial')}: must be a positive number")
        if not 0 <= e["tolerance"] < 1:
            raise InputError(f"{p}: {json_path('approved', i, 'tolerance')}: must be in [0, 1)")
    return data


def task_files(task: Task) -> set[Path]:
    """Every file a task is made of: what an approval must never overwrite."""
    files = {task.path, task.initial, task.reference.path, *task.templates,
             *(b.path for b in task.baselines.values())}
    for a in task.args:
        if a.is_buffer and a.init is not None and a.init.kind == "npy":
            files.add(task.path.parent / a.init.get("path"))
    return {f.resolve() for f in files if f is not None}


def _approved_copy(data: dict, ap: Path, task_name: str, dest: Path) -> dict | None:
    for e in data["approved"]:
        if e["task"] == task_name and (ap.parent / e["kernel"]).resolve() == dest.resolve():
            return e
    return None


def plan_approval(run_path, approvals_path, copy_to, tolerance: float) -> dict:
    """Every check of ``kforge approve``, nothing written: the entry to add and where the kernel
    goes.  Raises InputError naming the file (and JSON path) at the first problem."""
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 1):
        raise InputError(f"--tolerance {tolerance}: must be in [0, 1)")
    ap = Path(approvals_path)
    data = load_approvals(ap)
    run = RunDir.open(run_path)
    if not (run.path / "summary.json").is_file():
        raise InputError(f"{run.path}: has no summary.json: the run has not finished",
                         hint=f"resume it first: kforge optimize --resume {run.path}")
    summary = run.read_json("summary.json")
    meta = run.read_json("run.json")
    if summary.get("stop_reason") in ("interrupted", "error"):
        raise InputError(f"{run.path}: the run stopped with {summary['stop_reason']!r}; its best kernel never had "
                         "its final holdout check", hint=f"resume it first: kforge optimize --resume {run.path}")
    best = summary.get("best")
    best_cu = run.path / "best.cu"
    if not best or not best_cu.is_file():
        raise InputError(f"{run.path}: the run has no best kernel")
    if best.get("holdout") is None or best.get("id") == (summary.get("initial") or {}).get("id"):
        what = ("the initial kernel" if (summary.get("initial") or {}).get("origin", "task") == "task"
                else "the run's baseline (the first passing translation)")
        raise InputError(f"{run.path}: the best kernel is {what} ({best.get('id')}); nothing to approve")
    if not best["holdout"].get("passed", False):
        raise InputError(f"{run.path}: the best kernel failed the final holdout check; it cannot be approved")
    for key in ("speedup_vs_initial", "score_us"):
        v = best.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise InputError(f"{run.path / 'summary.json'}: {json_path('best', key)}: {v!r} is not a positive finite number; "
                             "nothing can be approved from it", hint="restore the file, or resume the run to write it anew")
    task = load_task(meta["manifest"])
    if task.name != summary["task"]:
        raise InputError(f"{run.path}: summary.json is for task {summary['task']!r}, its manifest for {task.name!r}")
    rule = _checked_rule(best_cu, task, best)     # an edited rule is named as such, before the sha256 says "changed"
    _check_best_source(run, best, best_cu)
    dest_dir = Path(copy_to)
    if dest_dir.exists() and not dest_dir.is_dir():
        raise InputError(f"--copy-to {dest_dir}: is a file, not a folder")
    dest = dest_dir / f"{task.name}.cu"
    new = best_cu.read_bytes()
    if dest.resolve() in task_files(task) or dest.resolve() == ap.resolve():
        raise InputError(f"--copy-to {dest_dir}: {dest} is one of the task's own files (its manifest, initial "
                         "kernel, templates or reference); an approval never overwrites them",
                         hint="approve into a folder of its own, e.g. --copy-to approved")
    backup = None
    if dest.exists():
        if not dest.is_file():
            raise InputError(f"{dest}: exists and is not a file")
        earlier = _approved_copy(data, ap, task.name, dest)
        old = dest.read_bytes()
        if old != new:
            if earlier is None:
                raise InputError(f"{dest}: exists and is not an earlier approved copy of {task.name} in {ap}; "
                                 "it is left as it is", hint="remove it or approve into another --copy-to folder")
            if hashlib.sha256(old).hexdigest() != earlier["sha256"]:
                raise InputError(f"{dest}: changed since it was approved (its sha256 differs from {ap}); "
                                 "it is left as it is", hint="restore it, or remove it to approve anew")
            backup = dest.with_name(dest.name + ".bak")
    baseline = _baseline_copy(run, summary, task, data, ap, dest_dir)
    entry = {"task": task.name, "manifest": _rel(Path(meta["manifest"]), ap.parent),
             "kernel": _rel(dest, ap.parent), "sha256": hashlib.sha256(new).hexdigest(),
             "speedup_vs_initial": best["speedup_vs_initial"], "score_us": best["score_us"],
             "tolerance": tolerance, "from_run": run.path.name,
             "device": ((run.read_json("env.json") or {}).get("device") or {}).get("name")}
    if rule is not None:       # settings per shape: what the approved kernel dispatches (kforge gate runs it so)
        entry["dispatch"] = rule.to_json()
    if baseline is not None:
        entry["baseline"], entry["baseline_sha256"] = _rel(baseline[0], ap.parent), hashlib.sha256(baseline[1]).hexdigest()
    return {"entry": entry, "data": data, "approvals": ap, "dest": dest, "source": new, "backup": backup,
            "baseline": baseline}


def _baseline_copy(run, summary: dict, task: Task, data: dict, ap: Path, dest_dir: Path):
    """(path, bytes) of the run's baseline copied beside the approved kernel, for a task without an
    initial kernel (its speedup was measured against the first passing translation, which
    ``kforge gate`` must time it against again); None for a task with one."""
    if task.initial is not None:
        return None
    init = summary.get("initial") or {}
    src = run.path / init.get("source_file", "")
    if not init.get("source_file") or not src.is_file():
        raise InputError(f"{run.path}: the task has no initial kernel and the run's baseline source is missing "
                         f"({init.get('source_file')}); the CI gate would have nothing to compare with")
    dest = dest_dir / f"{task.name}.baseline.cu"
    new = src.read_bytes()
    if dest.exists() and dest.read_bytes() != new:
        earlier = next((e for e in data["approved"] if e["task"] == task.name and e.get("baseline")
                        and (ap.parent / e["baseline"]).resolve() == dest.resolve()), None)
        if earlier is None or _sha(dest) != earlier.get("baseline_sha256"):
            raise InputError(f"{dest}: exists and is not an earlier approved baseline of {task.name} in {ap}; "
                             "it is left as it is", hint="remove it or approve into another --copy-to folder")
    return dest, new


def _checked_rule(best_cu: Path, task: Task, best: dict):
    """The dispatch rule best.cu carries (None without one), checked: the kernel's header parses,
    the rule runs on the task's cases, and it is the rule the run gated (summary.json)."""
    from kernel_forge.model.dispatch import Rule, problem

    try:
        cand = load_candidate(best_cu)
    except KForgeError as exc:
        raise InputError(f"{best_cu}: cannot be approved: {exc}") from None
    rule = cand.dispatch
    gated = best.get("dispatch")
    if (rule.to_json() if rule else None) != gated:
        said = Rule.from_json(gated).describe() if gated else "no dispatch rule"
        raise InputError(f"{best_cu}: its dispatch rule differs from the one the run gated ({said}); "
                         "it cannot be approved", hint="restore best.cu from the run's attempts/ folder")
    found = problem(task, rule)
    if found is not None:
        raise InputError(f"{best_cu}:{found[1]}: {found[0]}")
    return rule


def _check_best_source(run: RunDir, best: dict, best_cu: Path) -> None:
    """``best.cu`` must be the kernel the run measured: its sha256 is the one history.json recorded
    for the best attempt (a hand-edited best.cu would be approved with the original's speedup)."""
    from kernel_forge.evidence.history_log import read_history

    hist = read_history(run)
    if not hist:
        raise InputError(f"{run.path}: has no history.json, so best.cu cannot be checked against what was measured")
    for i, a in enumerate(hist.get("attempts", [])):
        if a.get("id") == best["id"]:
            got = _sha(best_cu)
            if got != a.get("sha256"):
                raise InputError(f"{best_cu}: its sha256 ({got[:12]}...) is not the one history.json records for the best "
                                 f"attempt {best['id']} ({json_path('attempts', i, 'sha256')}: {str(a.get('sha256'))[:12]}...): it "
                                 "changed since the run measured it; nothing was approved",
                                 hint=f"restore it from {run.path / a.get('source_file', 'attempts')}, or run the edited "
                                      "kernel through kforge eval / optimize to measure it")
            return
    raise InputError(f"{run.path / 'history.json'}: has no attempt {best['id']!r}, the best kernel summary.json names")


def approve_run(run_path, approvals_path, copy_to, tolerance: float) -> dict:
    """Check first (:func:`plan_approval`), write last: the kernel copy (the copy it replaces
    kept as ``.bak``), then the approvals file (its old version kept as ``.bak``)."""
    plan = plan_approval(run_path, approvals_path, copy_to, tolerance)
    dest, ap, entry = plan["dest"], plan["approvals"], plan["entry"]
    data = plan["data"]
    data["approved"] = [e for e in data["approved"] if e["task"] != entry["task"]] + [entry]
    text = (json.dumps(data, indent=2, allow_nan=False) + "\n").encode()
    items = []
    if plan["backup"] is not None:
        items.append((plan["backup"], dest.read_bytes()))
    if ap.is_file():
        items.append((ap.with_name(ap.name + ".bak"), ap.read_bytes()))
    items.append((dest, plan["source"]))
    if plan["baseline"] is not None:
        items.append((plan["baseline"][0], plan["baseline"][1]))
    items.append((ap, text))
    write_files(items, private=False)     # all staged on disk before any is renamed into place
    return entry


def _default_gate(task, options):
    from kernel_forge.ci.evaluate import default_gate
    return default_gate(task, options)


def run_regression(approvals_path, options: GateOptions, progress=lambda m: None, *,
                   gate_factory=_default_gate, devices: list[int] | None = None) -> list[dict]:
    """Gate every approved kernel, spread over ``devices`` (one at a time per GPU; each kernel's
    comparison with its initial kernel stays on the GPU that gated it).  The approvals file, the
    options and every manifest are checked before the first GPU probe; a missing, changed or
    refused kernel is a failed row."""
    ap = Path(approvals_path)
    if not ap.is_file():
        raise InputError(f"{ap}: no such approvals file", hint="kforge approve RUN --into FILE writes one")
    data = load_approvals(ap)
    if not data["approved"]:
        raise InputError(f"{ap}: no approved kernels")
    from kernel_forge.ci.evaluate import check_gate_settings

    check_gate_settings(options)
    tasks = []
    for i, e in enumerate(data["approved"]):
        try:
            tasks.append(load_task((ap.parent / e["manifest"]).resolve()))
        except InputError as exc:
            raise InputError(f"{ap}: {json_path('approved', i, 'manifest')}: {exc}") from None
    devices = list(devices or [options.device])
    results: list[dict | None] = [None] * len(tasks)
    todo: "queue.Queue[int]" = queue.Queue()
    for i in range(len(tasks)):
        todo.put(i)
    errors: list[BaseException] = []

    def work(device: int) -> None:        # one thread per GPU takes the next approved kernel
        opts = dataclasses.replace(options, device=device)
        while not errors:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = _check_entry(data["approved"][i], tasks[i], ap, opts, gate_factory, progress)
                results[i]["device"] = device
            except BaseException as exc:  # noqa: BLE001 - an environment problem ends the gate
                errors.append(exc)
                return

    threads = [threading.Thread(target=work, args=(d,), name=f"kforge-gate-gpu{d}", daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def _baseline_of(task: Task, e: dict, ap: Path) -> Path:
    """What an approved kernel is timed against: the task's initial kernel, or (a task without
    one) the run's baseline that approve copied beside it."""
    if task.initial is not None:
        return task.initial
    if not e.get("baseline"):
        raise InputError(f"{ap}: $.approved[{e['task']}]: the task has no initial kernel and the entry names no "
                         "baseline to time the approved kernel against", hint="approve the run again")
    path = (ap.parent / e["baseline"]).resolve()
    if not path.is_file() or _sha(path) != e.get("baseline_sha256"):
        raise InputError(f"{path}: the approved baseline is missing or changed since it was approved",
                         hint="approve the run again")
    return path


def _check_entry(e: dict, task: Task, ap: Path, options: GateOptions, gate_factory, progress) -> dict:
    """One approved kernel: still correct (full gate, holdout included) and not slower than approved."""
    t0 = time.perf_counter()
    kernel = (ap.parent / e["kernel"]).resolve()
    row = {"task": e["task"], "kernel": e["kernel"], "ok": False, "approved_speedup": e["speedup_vs_initial"]}
    if not kernel.is_file():
        row.update(problem="missing", detail=f"approved kernel {kernel} is missing")
        return row
    if _sha(kernel) != e["sha256"]:
        row.update(problem="changed", detail="the kernel file changed since it was approved (approve it again)")
        return row
    cand = load_candidate(kernel)
    try:
        preflight.check_kernel(task, cand)
    except preflight.KernelRefused as exc:
        row.update(problem=exc.reason, verdict=exc.reason, detail=f"WRONG: {exc.reason}: {exc.message}")
        return row
    progress(f"[kforge gate] {e['task']}: checking {e['kernel']} (GPU {options.device})")
    gate = gate_factory(task, options)
    try:
        ev = gate.evaluate(cand, roles=("correctness", "performance", "holdout"))
        row["verdict"] = ev.reason
        row["evaluation"] = ev.to_json(with_samples=False)
        if cand.dispatch is not None:     # settings per shape: the rule line each case ran with
            row["variants"] = {c.name: c.variant["branch"] for c in ev.cases if c.variant}
        if not ev.passed:
            row["detail"] = f"WRONG: {ev.reason}: {ev.message}"
            return row
        init_ev, cand_ev = gate.retime([load_candidate(_baseline_of(task, e, ap)), cand], rounds=2)
        if not (init_ev.passed and cand_ev.passed):
            row.update(problem="retime", detail=f"re-measurement failed: {init_ev.reason}/{cand_ev.reason}")
            return row
        speedup = init_ev.score_us / cand_ev.score_us
        floor = e["speedup_vs_initial"] * (1 - e["tolerance"])
        row.update(speedup=speedup, floor=floor, score_us=cand_ev.score_us, initial_us=init_ev.score_us)
        row["ok"] = speedup >= floor
        row["detail"] = (f"x{speedup:.2f} vs initial (approved x{e['speedup_vs_initial']:.2f}, "
                         f"floor x{floor:.2f})" + ("" if row["ok"] else ": SLOWER"))
    except KForgeError as exc:
        row.update(problem="error", detail=f"the gate could not run it: {exc}")
        if exc.exit_code == 3:
            raise
    finally:
        row["seconds"] = round(time.perf_counter() - t0, 3)
        gate.close()
    return row


__all__ = ["load_approvals", "plan_approval", "approve_run", "run_regression"]
