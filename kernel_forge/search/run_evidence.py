"""What the loop writes to its run folder as it goes: the history (the first save whole, every
later one the state and the attempts that changed), best.cu with a replay request per case, the
best's profile, the progress line of each iteration, and at the end summary.json and report.md
(:func:`finish`)."""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

from kernel_forge import __version__
from kernel_forge.common.errors import KForgeError
from kernel_forge.records.attempt import Attempt
from kernel_forge.search import selection
from kernel_forge.search.run_context import RunContext
from kernel_forge.search.stop_rules import iteration_limit


def history_doc(run: RunContext) -> dict:
    """history.json's content: the whole history."""
    return {"task": run.task.name, "kernel_forge": __version__, **run.state.to_json()}


def save_history(run: RunContext) -> None:
    """Save the history: the first save of this process writes it whole as the log's first line,
    every later one appends the state and the attempts that changed since the last."""
    changed = run.state.take_changes()
    if run.history_log.started:
        run.history_log.append(run.state.to_json(attempts=changed))
    else:
        run.history_log.start(history_doc(run))


def _manifest_sha256(run: RunContext, manifest: Path) -> str | None:
    """The manifest's hash, read once (the task is fixed for the run); None when it is gone."""
    from kernel_forge.common.reads import Unreadable, read_input_bytes

    if run.manifest_sha256 is None:
        try:
            run.manifest_sha256 = hashlib.sha256(read_input_bytes(manifest, "manifest")).hexdigest()
        except Unreadable:                          # gone since the start: its requests cannot check it
            run.manifest_sha256 = ""
    return run.manifest_sha256 or None


def write_best(run: RunContext) -> None:
    """best.cu and a replay request per shown case (``best-case-NAME.json``)."""
    best = run.state.best
    best_cu = run.run_dir.write_text("best.cu", run.kernels.source(best))
    # a request replays from any folder, and only against the manifest and kernel it was written for
    manifest = Path(run.task.path).resolve()
    hashes = {"kernel_sha256": hashlib.sha256(best_cu.read_bytes()).hexdigest()}
    if _manifest_sha256(run, manifest):
        hashes["manifest_sha256"] = _manifest_sha256(run, manifest)
    ev = best.evaluation or {}
    for c in ev.get("cases", []):
        if c.get("role") == "holdout":
            continue
        run.run_dir.write_json(f"best-case-{c['name']}.json", {
            "manifest": str(manifest), **hashes, "kernel": "best.cu", "attempt": best.id,
            "case": c["name"], "role": c["role"], "seeds": c.get("seeds", []),
            # under a dispatch rule: the setting this case ran with, and which rule line gave it
            "defines": (c.get("variant") or {}).get("defines", best.defines),
            "variant": c.get("variant"),
            "launch": c.get("launch"), "median_us": (c.get("timing") or {}).get("median"),
            "command": f"kforge replay {run.run_dir.path / ('best-case-' + c['name'] + '.json')}"})


def profile(run: RunContext, a: Attempt | None, *, final: bool = False) -> None:
    """Profile a best once (``profiles/<id>.json``); the seconds it took go to the state.  Only
    a prompt shows profiles, so without one only the ``final`` best is profiled (for the report)."""
    if a is None or not run.config.profile or a.profile:
        return
    if not final and not run.proposer.needs_prompt:
        return
    names = [c.name for c in run.task.cases if c.role == "performance"]
    t0 = time.monotonic()
    try:
        prof = run.gate.profile(run.kernels.candidate(a), names)
    except KForgeError as exc:
        prof = {"available": False, "reason": f"profiling failed: {exc}", "tool": "", "seconds": 0.0, "cases": {}}
    seconds = round(time.monotonic() - t0, 3)
    from kernel_forge.gate.profiler import save_profile
    a.profile = save_profile(run.run_dir, a.id, {**prof, "wall_seconds": seconds})
    run.state.profile_seconds[a.id] = seconds
    run.save()
    run.progress(f"[kforge]   profiled {a.id} with {prof.get('tool') or 'no tool'} in {seconds:.1f} s"
                 if prof.get("available") else f"[kforge]   no profile of {a.id}: {prof.get('reason', '')}")


def iteration_line(run: RunContext) -> None:
    """The progress line of an iteration: gated, rejected by reason, the best, the spend."""
    state = run.state
    rejected: dict[str, int] = {}
    for a in state.attempts:
        if a.status == "failed":
            rejected[a.reason] = rejected.get(a.reason, 0) + 1
    rej = ", ".join(f"{k} {v}" for k, v in sorted(rejected.items())) or "none"
    gated = sum(a.evaluation is not None for a in state.attempts)
    best = f"best {state.best.id} x{state.speedup():.2f} vs initial" if state.best else "no baseline yet"
    limit = iteration_limit(run.config, run.proposer.name)
    run.progress(f"[kforge] iteration {state.iteration}{f'/{limit}' if limit else ''}: {gated} gated, "
                 f"rejected: {rej}; {best}; "
                 f"${state.cost_usd:.4f}, {state.tokens['input'] + state.tokens['output']} tokens")
    if run.is_tuner:
        run.progress(f"[kforge]   search {run.strategy.name}: {run.spaces.line(state.attempts)}")


def finish(run: RunContext) -> dict:
    """The run's end: the final holdout and profile of the best, best.cu, history.json whole,
    summary.json and report.md, the archive; the summary."""
    from kernel_forge.reports.summary import write_summary

    state = run.state
    # the final holdout check: not after an error, nor after Ctrl-C (the resumed run does it)
    if state.best is not None and state.best is not state.initial and state.stop_reason not in ("error", "interrupted"):
        selection.final_holdout(run.gate, state.best, run.kernels.candidate)
    if state.stop_reason not in ("error", "interrupted"):
        run.profile(state.best, final=True)
    if state.best is not None:
        run.write_best()
    run.save()                   # the log holds it all, should history.json fail
    run.history_log.finish(history_doc(run))
    summary = write_summary(state, run.task, run.run_dir, proposer=run.proposer.name,
                            search=run.spaces.summary(state.attempts), gate=run.gate)
    if (run.config.archive or "").lower() != "off" and state.stop_reason != "interrupted":
        from kernel_forge.archive.harvest import record_run
        record_run(run.run_dir.path, path=run.config.archive, task=run.task, progress=run.progress)
    run.progress(f"[kforge] stopped: {state.stop_reason}. "
                 f"Best {summary['best']['id'] if summary.get('best') else '-'}"
                 f" x{state.speedup():.2f} vs initial. Evidence: {run.run_dir.path}")
    if state.stop_detail:
        run.progress(f"[kforge] {state.stop_detail}")
    left = [a for a in state.attempts if a.status == "pending"]
    if left and state.stop_reason == "time_limit":
        run.progress(f"[kforge] {len(left)} candidate(s) left ungated; to gate them: "
                     f"kforge optimize --resume {run.run_dir.path} --time-limit LONGER")
    return summary
