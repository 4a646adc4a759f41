"""``summary.json``, ``report.md`` and the plots of a run, from its state (its
:class:`~kernel_forge.records.run_state.RunState` and the
:class:`~kernel_forge.records.attempt.Attempt` s in it) and its run folder."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kernel_forge import __version__
from kernel_forge.records.attempt import Attempt
from kernel_forge.records.run_state import RunState

if TYPE_CHECKING:
    from kernel_forge.evidence.run_dir import RunDir
    from kernel_forge.analysis.diagnosis import Diagnosis
    from kernel_forge.gate.gatelike import GateLike
    from kernel_forge.model.task import Task


def _case_table(ev: dict | None) -> dict[str, dict]:
    out = {}
    for c in (ev or {}).get("cases", []):
        if c.get("timing"):
            out[c["name"]] = c
    return out


def run_diagnosis(state: RunState, task: Task, run_dir: RunDir, gate: GateLike | None = None) -> Diagnosis | None:
    """The diagnosis of the run's best (device and calibration from env.json, else from ``gate``
    where one is given; the profile from profiles/<best>.json when the loop saved one), or None
    without a best."""
    from kernel_forge.analysis.diagnosis import diagnose

    best = state.best
    if best is None or not best.evaluation:
        return None
    env = run_dir.read_json("env.json") or {}
    device, calibration = env.get("device"), env.get("calibration")
    if device is None:
        try:
            device, calibration = gate.device_info(), gate.calibrate()
        except Exception:  # noqa: BLE001 - a summary never fails for want of a device
            device = calibration = None
    try:
        profile = run_dir.read_json(f"profiles/{best.id}.json")
    except Exception:  # noqa: BLE001 - a damaged profile is left out, not fatal
        profile = None
    try:
        source = (run_dir.path / best.source_file).read_text(encoding="utf-8") if best.source_file else None
    except (OSError, UnicodeDecodeError):
        source = None
    initial = state.initial.evaluation if state.initial is not None else None
    return diagnose(task, best.evaluation, initial=initial, baselines=state.baselines, device=device,
                    calibration=calibration, profile=profile, source=source)


def _directions(attempts: list[Attempt]) -> list[dict]:
    """Per direction the prompts gave: attempts, how many passed, the fastest, and the model cost."""
    rows: dict[str, dict] = {}
    for a in attempts:
        if not a.direction:
            continue
        r = rows.setdefault(a.direction, {"direction": a.direction, "attempts": 0, "passed": 0,
                                          "best_score_us": None, "cost_usd": 0.0})
        r["attempts"] += 1
        r["cost_usd"] = round(r["cost_usd"] + a.cost_usd, 6)
        if a.status == "passed" and a.score_us:
            r["passed"] += 1
            r["best_score_us"] = min(a.score_us, r["best_score_us"] or a.score_us)
    return list(rows.values())


def build_summary(state: RunState, task: Task, run_dir: RunDir, *, proposer: str, search: dict,
                  gate: GateLike | None = None) -> dict:
    """summary.json of a run: its state, the ``task``, its run folder, the proposer's name, the
    search's summary (strategy and spaces) and the ``gate`` (the device, where env.json has none)."""
    best, initial = state.best, state.initial
    done = [a for a in state.attempts if a.status != "pending"]
    rejected: dict[str, int] = {}
    for a in done:
        if a.status == "failed":
            rejected[a.reason] = rejected.get(a.reason, 0) + 1
    gated = sum(a.evaluation is not None for a in state.attempts)   # duplicates and conflicts cost no GPU time
    elapsed = state.elapsed()
    summary = {
        "task": task.name, "run": run_dir.path.name, "kernel_forge": __version__,
        "stop_reason": state.stop_reason, "stop_detail": state.stop_detail or "",
        "iterations": state.iteration, "attempts": len(state.attempts),
        "gated": gated, "passed": sum(a.status == "passed" for a in done), "rejected": rejected,
        "wall_seconds": round(elapsed, 2),
        "candidates_per_minute": round(60.0 * gated / elapsed, 2) if elapsed > 0 else None,
        "tokens": dict(state.tokens), "cost_usd": round(state.cost_usd, 6), "per_model": state.per_model,
        "proposer": proposer, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "best": None, "initial": None, "baselines": {}, "directions": _directions(state.attempts),
        "search": search, "diagnosis": None,
        "generated": (run_dir.read_json("run.json", check=False) or {}).get("generated"),
    }
    if initial is not None:
        summary["initial"] = {"id": initial.id, "score_us": initial.score_us, **origin(initial)}
    for name, ev in state.baselines.items():
        summary["baselines"][name] = {"score_us": ev.get("score_us"), "passed": ev.get("passed")}
    if best is not None:
        b_cases = _case_table(best.evaluation)
        i_cases = _case_table(initial.evaluation if initial else None)
        per_case = []
        for name, c in b_cases.items():
            row = {"case": name, "median_us": c["timing"]["median"], "p10_us": c["timing"]["p10"],
                   "p90_us": c["timing"]["p90"], "gbps": c.get("gbps"), "tflops": c.get("tflops"),
                   "pct_peak_bw": c.get("pct_peak_bw"), "pct_peak_flops": c.get("pct_peak_flops")}
            if c.get("variant"):                 # under a dispatch rule: the line this case ran with
                row["variant"] = c["variant"]
            row["speedup_vs_initial"] = (i_cases[name]["timing"]["median"] / c["timing"]["median"]
                                         if name in i_cases else None)
            row["speedup_vs_baselines"] = {}
            for bname, bev in state.baselines.items():
                bc = _case_table(bev).get(name)
                if bc:
                    row["speedup_vs_baselines"][bname] = bc["timing"]["median"] / c["timing"]["median"]
            per_case.append(row)
        diagnosis = run_diagnosis(state, task, run_dir, gate)
        summary["diagnosis"] = diagnosis.to_json() if diagnosis is not None else None
        summary["best"] = {
            "id": best.id, "proposer": best.proposer, "label": best.label, "defines": best.defines,
            "score_us": best.score_us, "speedup_vs_initial": state.speedup(),
            "speedup_vs_baselines": {k: (v.get("score_us") / best.score_us if v.get("score_us") and best.score_us else None)
                                     for k, v in state.baselines.items()},
            "holdout": best.holdout, "per_case": per_case, "source_file": best.source_file,
            "retimed": best.retimed, "direction": best.direction, "dispatch": best.dispatch,
            # every case where the best is slower than a baseline or the initial kernel (ratio < 1)
            "slower_than": [{"case": x["case"], "than": x["than"], "ratio": x["ratio"]}
                            for x in (diagnosis.slower if diagnosis is not None else [])],
        }
    return summary


def write_summary(state: RunState, task: Task, run_dir: RunDir, *, proposer: str, search: dict,
                  gate: GateLike | None = None) -> dict:
    """summary.json and report.md of a run (arguments as :func:`build_summary`'s)."""
    summary = build_summary(state, task, run_dir, proposer=proposer, search=search, gate=gate)
    run_dir.write_json("summary.json", summary)
    try:
        from kernel_forge.reports.run_report import write_report
        write_report(run_dir, summary, [a.to_json() for a in state.attempts])
    except Exception as exc:  # noqa: BLE001 - a report failure must not lose the summary
        run_dir.write_text("report.md", f"# Report\n\nThe report could not be drawn: {type(exc).__name__}: {exc}\n")
    return summary


def origin(initial: Attempt | None) -> dict | None:
    """Where a run's baseline came from: ``task`` (the manifest's initial kernel), ``translation``
    (model-written, or replayed), or ``template`` (the built-in tuner's first passing setting)."""
    if initial is None:
        return None
    proposer = initial.proposer
    if proposer == "initial":
        kind, note = "task", "the task's initial kernel"
    elif proposer == "tune":
        kind, note = "template", (f"the first passing setting of template {initial.label} (no initial kernel: "
                                  "the built-in tuner's first passing setting is the baseline)")
    else:
        who = "replayed from recorded proposals" if proposer == "replay" else f"written by {proposer}"
        kind, note = "translation", (f"a translation of the reference {who} (no initial kernel: the first "
                                     "translation that passed the gate and the holdout is the baseline)")
    return {"origin": kind, "proposer": proposer, "source_file": initial.source_file, "note": note}
