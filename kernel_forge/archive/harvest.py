"""Harvesting a run folder: the passing kernels of ``runs/run-NNN`` as archive entries.

Reads the run's evidence (run.json, manifest.json, env.json, history.json and each attempt's
source file), keeps the attempts that passed every case and were not caught by a holdout check,
diagnoses each against the run's task when its manifest still loads unchanged, and adds them to
the archive (:func:`archive_run`, :func:`record_run` at the end of ``kforge optimize``).  Why every
other attempt stayed out is counted by reason.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernel_forge import __version__
from kernel_forge.archive.format import Entry
from kernel_forge.archive.store import Archive, add_entries, open_archive
from kernel_forge.common.errors import InputError, KForgeError


@dataclass
class ArchiveReport:
    """What :func:`archive_run` did with one run folder."""

    run: str                                             #: the run folder
    added: int = 0                                       #: kernels new to the archive
    present: int = 0                                     #: passing kernels already archived (same hash, task, GPU)
    excluded: dict = field(default_factory=dict)         #: why the other attempts stayed out: status/reason -> count
    ids: list = field(default_factory=list)              #: content hashes of the passing attempts

    def to_json(self) -> dict:
        return asdict(self)


def _read(run: Path, name: str, required: bool):
    p = run / name
    if not p.is_file():
        if required:
            raise InputError(f"{run}: not a kforge run folder (no {name})", hint="pass a folder like runs/run-007")
        return None
    from kernel_forge.evidence.run_dir import read_evidence

    # history.json is checked against its schema: a wrong-shaped one is an error, not "0 added"
    try:
        return read_evidence(p, check=name == "history.json")
    except InputError as exc:
        raise InputError(f"{exc.message}; nothing was archived from this run", hint=exc.hint) from None


def _history(run: Path) -> dict:
    """The run's history (history.json, or the attempt log of a run killed before it finished),
    checked against its schema: a wrong-shaped one is an error, not "0 added"."""
    from kernel_forge.evidence.history_log import read_history

    try:
        return read_history(run, {}) or {}
    except InputError as exc:
        raise InputError(f"{exc.message}; nothing was archived from this run", hint=exc.hint) from None


def _all_cases_passed(ev: dict | None) -> bool:
    return bool(ev) and ev.get("passed") is True and all(c.get("passed") for c in ev.get("cases", []))


def _exclusion(a: dict, bad_holdout: set[str]) -> str | None:
    """Why attempt ``a`` (history.json) may not go in, or None when it passed everything."""
    if a.get("status") != "passed":
        return a.get("status") if a.get("status") == "pending" else (a.get("reason") or "failed")
    if not _all_cases_passed(a.get("evaluation")) or a.get("score_us") is None:
        return "failed_case"
    hold = a.get("holdout")
    if (hold is not None and not hold.get("passed")) or a.get("sha256") in bad_holdout:
        return "holdout_failed"
    return None


def _holdout_state(a: dict) -> str:
    if (a.get("holdout") or {}).get("passed"):
        return "passed"
    if any(c.get("role") == "holdout" for c in (a.get("evaluation") or {}).get("cases", [])):
        return "passed"     # the initial kernel's own evaluation includes the holdout cases
    return "not_run"


def _cases(ev: dict, diag: dict | None) -> list[dict]:
    bounds = {c["name"]: c.get("bound", "unknown") for c in (diag or {}).get("cases", [])}
    out = []
    for c in ev.get("cases", []):
        if c.get("role") != "performance" or not c.get("timing"):
            continue
        out.append({"name": c["name"], "median_us": c["timing"]["median"], "gbps": c.get("gbps"),
                    "tflops": c.get("tflops"), "pct_peak_bw": c.get("pct_peak_bw"),
                    "pct_peak_flops": c.get("pct_peak_flops"), "bound": bounds.get(c["name"], "unknown")})
    return out


def _overall_bound(cases: list[dict]) -> str:
    known = Counter(c["bound"] for c in cases if c.get("bound") and c["bound"] != "unknown")
    return known.most_common(1)[0][0] if known else "unknown"


def _load_task_for(meta: dict):
    """The run's Task when its manifest still loads with the same hash, else None."""
    from kernel_forge.model.task import load_task
    try:
        task = load_task(meta["manifest"])
        return task if task.hash() == meta.get("hashes", {}).get("task") else None
    except Exception:  # noqa: BLE001 - a moved or changed manifest: archive without a diagnosis
        return None


def _diagnose(task, ev: dict, initial: dict | None, baselines: dict, env: dict) -> dict | None:
    if task is None:
        return None
    from kernel_forge.analysis.diagnosis import diagnose
    try:
        return diagnose(task, ev, initial=initial, baselines=baselines, device=env.get("device"),
                        calibration=env.get("calibration"), profile=None).to_json()
    except Exception:  # noqa: BLE001 - a diagnosis is extra information, never a reason to lose a kernel
        return None


def entries_from_run(run_dir: str | Path, *, task=None) -> tuple[list[Entry], dict]:
    """The passing attempts of a run folder as entries, and why the others were left out.
    ``task`` (the run's :class:`Task`) gives each its diagnosis; without it the run's manifest is
    loaded when it is still there unchanged."""
    run = Path(run_dir)
    meta = _read(run, "run.json", True)
    manifest = _read(run, "manifest.json", True)
    env = _read(run, "env.json", False) or {}
    hist = _history(run)
    attempts = hist.get("attempts", [])
    if task is None:
        task = _load_task_for(meta)
    task_hash = meta.get("hashes", {}).get("task") or (task.hash() if task is not None else "")
    if not task_hash:
        raise InputError(f"{run / 'run.json'}: $.hashes.task missing; cannot tell which task this run is")
    device = env.get("device") or {}
    initial = next((a for a in attempts if a.get("proposer") == "initial" or a.get("baseline")), None)
    initial_ev = initial.get("evaluation") if initial else None
    baselines = hist.get("baselines", {}) or {}
    bad_holdout = {a.get("sha256") for a in attempts if a.get("reason") == "holdout_failed"
                   or ((a.get("holdout") or {}).get("passed") is False)} - {None, ""}
    excluded: Counter = Counter()
    out = []
    for a in attempts:
        why = _exclusion(a, bad_holdout)
        if why:
            excluded[why] += 1
            continue
        try:
            source = (run / a["source_file"]).read_text(encoding="utf-8")
        except (OSError, KeyError, UnicodeDecodeError):
            excluded["source_missing"] += 1
            continue
        ev = a["evaluation"]
        diag = _diagnose(task, ev, initial_ev, baselines, env)
        cases = _cases(ev, diag)
        score = a["score_us"]
        init_score = initial.get("score_us") if initial else None
        out.append(Entry(
            task_name=manifest.get("name") or meta.get("task", ""),
            task_description=manifest.get("description", "") or "",
            task_signature=manifest.get("signature", ""), task_hash=task_hash,
            source=source, launch=a.get("launch"), defines=a.get("defines") or {},
            label=a.get("label", "") or "", proposer=a.get("proposer", "") or "",
            score_us=score, speedup_vs_initial=(init_score / score if init_score and score else None),
            speedup_vs_baselines={k: (b.get("score_us") / score if b.get("score_us") and score else None)
                                  for k, b in baselines.items()},
            cases=cases, bound=_overall_bound(cases), diagnosis=diag, holdout=_holdout_state(a),
            gpu_name=str(device.get("name") or ""), gpu_arch=str(device.get("arch") or ""),
            driver=str(device.get("driver_version") or ""), nvrtc=str(env.get("nvrtc") or ""),
            run=str(run.resolve()), attempt=a.get("id", ""),
            kernel_forge=hist.get("kernel_forge") or meta.get("kernel_forge") or __version__))
    return out, dict(excluded)


def archive_run(run_dir: str | Path, archive: Archive, *, task=None) -> ArchiveReport:
    """Add every passing attempt of a finished or partial run folder (reads run.json,
    manifest.json, env.json, history.json); idempotent: a second call adds nothing."""
    entries, excluded = entries_from_run(run_dir, task=task)
    added, present = add_entries(archive, entries) if entries else (0, 0)
    return ArchiveReport(run=str(Path(run_dir)), added=added, present=present, excluded=excluded,
                         ids=[e.content_hash for e in entries])


def record_run(run_dir: str | Path, *, path: str | Path | None = None, task=None,
               progress=lambda msg: None) -> ArchiveReport | None:
    """:func:`archive_run` for the end of ``kforge optimize``: opens the archive at ``path``
    (default :func:`default_path`), reports through ``progress``, and never raises for an
    archive problem (a run's evidence matters more than its archiving): returns None then."""
    try:
        with open_archive(path) as arch:
            rep = archive_run(run_dir, arch, task=task)
            progress(f"[kforge] archive {arch.path}: {rep.added} kernel(s) added, {rep.present} already there")
            return rep
    except KForgeError as exc:
        progress(f"[kforge] warning: the run was not archived: {exc}")
        return None
