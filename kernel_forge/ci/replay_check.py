"""``kforge replay``: re-run a recorded ``best-case-NAME.json`` and say whether its claim holds.

The claim is the recorded median on that case.  It holds when the median measured now is not
slower than the recorded one by more than the noise measured with the two: the half-widths of
the recorded timing's p20-p80 band (from the run's history.json) and of the new samples'
band, added, and never less than :data:`FLOOR` of the recorded median (what the timing repeats
to).  Being faster than recorded holds the claim (it is said).  A case that fails the gate, or
a claim that does not hold, is exit 1 in the CLI.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from kernel_forge.gate import preflight
from kernel_forge.model.candidate import load_candidate
from kernel_forge.common.errors import InputError, ManifestError
from kernel_forge.common.json_path import json_path
from kernel_forge.common.reads import MAX_INPUT, MAX_KERNEL, Unreadable, read_input_bytes
from kernel_forge.evidence.run_dir import read_evidence, schema
from kernel_forge.common.stats import Timing
from kernel_forge.model.task import load_task

#: the least allowed difference, relative to the recorded median (the timing repeats to ~1 %)
FLOOR = 0.01


def load_request(path: str | Path) -> dict:
    """A replay request, checked against its schema (a missing key is an error naming it)."""
    import jsonschema

    p = Path(path)
    data = read_evidence(p, check=False, what="replay request")
    if isinstance(data, dict):
        data.setdefault("variant", None)    # written before dispatch rules: no rule, nothing to check
    validator = jsonschema.Draft202012Validator(schema("replay_request.schema.json"))
    err = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if err is not None:
        raise InputError(f"{p}: {json_path(*err.absolute_path)}: {err.message} (not a replay request: see "
                         "kernel_forge/schemas/replay_request.schema.json)")
    return data


def recorded_band(request_path: Path, req: dict) -> tuple[float, float] | None:
    """(p20, p80) of the recorded timing, from the run history beside the request (history.json,
    or the attempt log of a run still going; None when there is none; a damaged one is an
    InputError naming it)."""
    from kernel_forge.evidence.history_log import read_history

    data = read_history(request_path.parent)
    if data is None:
        return None
    try:
        for a in data.get("attempts", []):
            if a.get("id") == req["attempt"]:
                for c in (a.get("evaluation") or {}).get("cases", []):
                    if c.get("name") == req["case"] and c.get("timing"):
                        return float(c["timing"]["p20"]), float(c["timing"]["p80"])
    except (ValueError, TypeError, KeyError, AttributeError, InputError):
        return None
    return None


@dataclass
class ClaimVerdict:
    holds: bool | None                         #: None: nothing timed to compare (a correctness case)
    recorded_us: float | None
    now_us: float | None
    recorded_band_us: tuple[float, float] | None
    now_band_us: tuple[float, float] | None
    allowed_us: float | None                   #: how much slower than recorded still holds
    detail: str

    def to_json(self) -> dict:
        d = dict(vars(self))
        d["delta_pct"] = (100.0 * (self.now_us - self.recorded_us) / self.recorded_us
                          if self.now_us is not None and self.recorded_us else None)
        for k in ("recorded_band_us", "now_band_us"):
            d[k] = list(d[k]) if d[k] is not None else None
        return d


def judge(recorded_us: float | None, band: tuple[float, float] | None, now: Timing | None) -> ClaimVerdict:
    """Whether the recorded median still holds against the new timing (see the module)."""
    if recorded_us is None or now is None:
        return ClaimVerdict(None, recorded_us, now.median if now else None, band,
                            (now.p20, now.p80) if now else None, None, "no recorded time to compare")
    half_rec = (band[1] - band[0]) / 2 if band else 0.0
    half_now = (now.p80 - now.p20) / 2
    allowed = max(half_rec + half_now, FLOOR * recorded_us)
    delta = now.median - recorded_us
    pct = 100.0 * delta / recorded_us
    if delta > allowed:
        detail = (f"does NOT hold: now {now.median:.2f} µs is {pct:+.1f} % slower than the recorded "
                  f"{recorded_us:.2f} µs, beyond the noise band (±{allowed:.2f} µs)")
        return ClaimVerdict(False, recorded_us, now.median, band, (now.p20, now.p80), allowed, detail)
    if delta < -allowed:
        detail = (f"holds: now {now.median:.2f} µs is {pct:+.1f} % faster than the recorded {recorded_us:.2f} µs "
                  f"(beyond the noise band ±{allowed:.2f} µs)")
    else:
        detail = (f"holds: now {now.median:.2f} µs vs recorded {recorded_us:.2f} µs ({pct:+.1f} %), within the "
                  f"noise band ±{allowed:.2f} µs")
    if band is None:
        detail += " (the recorded band is unknown: history.json not beside the request)"
    return ClaimVerdict(True, recorded_us, now.median, band, (now.p20, now.p80), allowed, detail)


def _manifest(p: Path, req: dict) -> Path:
    m = Path(req["manifest"])
    if m.is_absolute():                # requests record it so; they replay from any folder
        if m.is_file():
            return m
    elif m.is_file():                  # requests of earlier releases: relative to where the run started
        return m
    elif (p.parent / m).is_file():
        return p.parent / m
    raise ManifestError(f"the manifest {req['manifest']} of this replay request does not exist",
                        file=str(p), json_path="$.manifest")


def sha256_of(path: str | Path, what: str, *, limit: int = MAX_INPUT) -> str:
    """The sha256 of a file's bytes, read through the one bounded reader."""
    return hashlib.sha256(read_input_bytes(path, what, limit=limit)).hexdigest()


def request_files(p: Path, req: dict) -> tuple[Path, Path]:
    """The manifest and the kernel a replay request names, each checked against the sha256
    recorded with it (requests of earlier releases have none): a replay of another task, or of
    another kernel, would not check the recorded claim."""
    manifest, kernel = _manifest(p, req), p.parent / req["kernel"]
    for key, path, what, limit in (("manifest", manifest, "manifest", MAX_INPUT),
                                   ("kernel", kernel, "kernel file", MAX_KERNEL)):
        want = req.get(f"{key}_sha256")
        if want is None:
            continue
        try:
            got = sha256_of(path, what, limit=limit)
        except Unreadable as exc:
            raise InputError(f"{p}: $.{key}: {exc.message}") from None
        if got != want:
            raise InputError(f"{p}: $.{key}_sha256: the {what} {path} changed since this request was written "
                             f"(sha256 {got[:12]}..., recorded {want[:12]}...); nothing was run",
                             hint="replay a request of a run over this file, or restore the file it recorded")
    return manifest, kernel


def replay(request_path, options, *, gate_factory=None) -> tuple[dict, str]:
    """Re-run the request's kernel on its case with its seeds; (result JSON, table text).
    ``options`` is a GateOptions; its seeds are replaced by the recorded ones."""
    from kernel_forge.ci.evaluate import check_gate_settings, default_gate
    from kernel_forge.reports.evaluation_text import eval_table

    p = Path(request_path)
    req = load_request(p)
    manifest, kernel = request_files(p, req)
    task = load_task(manifest)
    cand = load_candidate(kernel)
    if req["case"] not in {c.name for c in task.cases}:
        raise InputError(f"{p}: $.case: the task has no case {req['case']!r}")
    band = recorded_band(p, req)          # a damaged history.json is found before the GPU
    seeds = req.get("seeds") or [0]
    options.seed = seeds[0]
    options.fresh_seeds = list(seeds[1:])
    options.extra_draws = len(options.fresh_seeds)
    check_gate_settings(options)
    preflight.check_kernel(task, cand, file=str(kernel))
    gate = (gate_factory or default_gate)(task, options)
    try:
        ev = gate.evaluate(cand, roles=(req.get("role", "performance"),), only={req["case"]})
    finally:
        gate.close()
    ev.cases = [c for c in ev.cases if c.name == req["case"]]
    case = ev.cases[0] if ev.cases else None
    claim = judge(req.get("median_us"), band, case.timing if case else None)
    passed = ev.passed and (case is None or case.passed)
    same = same_variant(req.get("variant"), case.variant if case else None)
    result = {"request": str(p), "task": task.name, "case": req["case"], "passed": passed, "reason": ev.reason,
              "message": ev.message, "claim": claim.to_json(),
              "ok": passed and claim.holds is not False and same is not False,
              "evaluation": ev.to_json(with_samples=False)}
    table = eval_table(task, ev, None, {}) + f"\nclaim: {claim.detail}"
    if case is not None and (case.variant or req.get("variant")):     # best.cu carries a dispatch rule
        result["variant"] = case.variant
        result["variant_recorded"] = req.get("variant")
        table += "\n" + variant_text(req.get("variant"), case.variant, same)
    return result, table


def same_variant(recorded: dict | None, now: dict | None) -> bool | None:
    """Whether a case replayed under a dispatch rule ran the setting it was recorded with (None
    when neither run had a rule)."""
    if recorded is None and now is None:
        return None
    if recorded is None or now is None:
        return False
    return recorded.get("defines") == now.get("defines")


def variant_text(recorded: dict | None, now: dict | None, same: bool | None) -> str:
    show = lambda v: (f"line {v['branch'] + 1} `{v['when']}` -> "  # noqa: E731
                      + ", ".join(f"{k}={x}" for k, x in sorted(v["defines"].items()))) if v else "no dispatch rule"
    if same:
        return f"variant: {show(now)} (as recorded)"
    return (f"variant: ran {show(now)}, but the case was recorded with {show(recorded)}: the rule or the case's "
            "variables changed since the run, so this does not replay the recorded kernel")
