"""The attempt ledger and what it teaches, as prompt sections.

:func:`ledger_lines` gives every attempt one line: its technique (the direction it was asked for),
the kernel it started from, its verdict, its speed against that parent per performance case and
overall (gain, slower, or within the noise), the speedup the proposer predicted beside the one
measured, and how the profile changed where both were profiled.  A tuned proposal's settings
share one line.  :func:`lessons` turns the ledger into the techniques to try again (they gained)
and to avoid (they failed or slowed down and never gained); :func:`ledger_section` renders both
for the prompt, :func:`start_section` the parent a proposal starts from when the search strategy
chose one other than the best.  Holdout cases never appear: a hidden failure is only "failed a
hidden case".
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kernel_forge.analysis.diagnosis_text import us
from kernel_forge.search.lineage import comparable_parent, ratio_to_parent

if TYPE_CHECKING:
    from kernel_forge.records.attempt import Attempt
    from kernel_forge.search.prompt_blocks import PromptAttempt
    from kernel_forge.model.task import Task

#: most ledger lines in one prompt (older ones are summed up in one line)
LEDGER_LINES = 40


def _perf(ev: dict | None) -> dict[str, float]:
    return {c["name"]: c["timing"]["median"] for c in (ev or {}).get("cases", [])
            if c.get("role") == "performance" and c.get("timing") and c["timing"].get("median")}


def case_ratios(a: "Attempt", parent: "Attempt | None") -> dict[str, float]:
    """Per performance case, parent median / attempt median (>1: faster)."""
    if parent is None or a.status != "passed":
        return {}
    mine, theirs = _perf(a.evaluation), _perf(parent.evaluation)
    return {k: theirs[k] / v for k, v in mine.items() if k in theirs and v > 0}


def verdict(a: "Attempt", parent: "Attempt | None", noise: float) -> str:
    """``gain``, ``slower``, ``noise`` (within it), ``failed``, ``duplicate`` or ``pending``."""
    if a.status == "pending":
        return "pending"
    if a.reason == "duplicate":
        return "duplicate"
    if a.status != "passed":
        return "failed"
    r = ratio_to_parent(a, parent)
    if r is None:
        return "noise"
    return "gain" if r > 1 + noise else "slower" if r < 1 - noise else "noise"


def _tech(a: "Attempt") -> str:
    t = (a.technique or "").split("#")[0]
    if t:
        return t
    return f"tune:{a.label}" if a.proposer == "tune" else (a.direction[:40] or "no direction")


def profile_change(a_prof: dict | None, p_prof: dict | None, case: str | None = None) -> str:
    """``large: DRAM 45→31%, SM 60→82%, top stall long_scoreboard→mio_throttle`` between two
    profiles (``GateLike.profile`` answers), on ``case`` or the first case both have."""
    if not a_prof or not p_prof or not a_prof.get("available") or not p_prof.get("available"):
        return ""
    from kernel_forge.analysis.profile_reading import normalise_case

    ac, pc = a_prof.get("cases") or {}, p_prof.get("cases") or {}
    names = [case] if case in ac and case in pc else [n for n in ac if n in pc]
    if not names:
        return ""
    name = names[0]
    x, y = normalise_case(ac[name]) or {}, normalise_case(pc[name]) or {}
    parts = []
    for key, label in (("dram_pct", "DRAM"), ("l2_pct", "L2"), ("sm_pct", "SM"),
                       ("achieved_occupancy_pct", "occupancy")):
        if x.get(key) is not None and y.get(key) is not None and abs(x[key] - y[key]) >= 1:
            parts.append(f"{label} {y[key]:.0f}→{x[key]:.0f}%")
    sx = ((x.get("stalls") or [{}])[0] or {}).get("reason")
    sy = ((y.get("stalls") or [{}])[0] or {}).get("reason")
    if sx and sy and sx != sy:
        parts.append(f"top stall {sy}→{sx}")
    return f"{name}: " + ", ".join(parts) if parts else ""


def _groups(attempts: list["Attempt"]) -> list[list["Attempt"]]:
    """Attempts in order, the settings of one tuned proposal (one label, one iteration) together;
    the built-in tuner's rounds over one template from one parent are one line whatever the
    iterations (their fastest setting is what there is to learn)."""
    out: list[list] = []
    index: dict[tuple, int] = {}
    rounds: dict[tuple, int] = {}
    for a in attempts:
        if a.proposer == "initial":
            continue
        key = (a.iteration, a.label, a.proposer)
        if a.tunables and key in index:
            out[index[key]].append(a)
            continue
        again = ("tune", a.label, a.parent)
        if a.proposer == "tune" and a.tunables and not a.dispatch and again in rounds:
            index[key] = rounds[again]
            out[rounds[again]].append(a)
            continue
        index[key] = len(out)
        if a.proposer == "tune" and a.tunables and not a.dispatch:
            rounds[again] = len(out)
        out.append([a])
    return out


def _line(members: list["Attempt"], by_id: dict, noise: float, profile: Callable) -> tuple[str, str, str]:
    """(line, technique, verdict) of one proposal."""
    passed = [m for m in members if m.status == "passed" and m.score_us]
    head = min(passed, key=lambda m: m.score_us) if passed else members[0]
    parent = comparable_parent(members[0], by_id)
    tech = _tech(members[0])
    what = verdict(head, parent, noise)
    ids = members[0].id if len(members) == 1 else f"{members[0].id}..{members[-1].id}"
    src = f" from {members[0].parent}" if members[0].parent else ""
    if parent is not None and parent.id != members[0].parent:
        src += f" (a fix; compared with {parent.id})"
    if members[0].second_parent:
        src += f" x {members[0].second_parent}"
    line = f"- {ids} [{tech}]{src}: "
    if len(members) > 1:
        failed = sum(m.status == "failed" for m in members)
        line += f"{len(members)} settings, fastest {head.id} ({' '.join(f'{k}={v}' for k, v in sorted(head.defines.items()))})"
        line += f", {failed} failed; " if failed else "; "
    if what == "failed":
        reason = "failed a hidden case" if head.reason == "holdout_failed" else f"failed: {head.reason}"
        return line + reason, tech, what
    if what == "duplicate":
        return line + (head.message.split(":")[0] if head.message else "duplicate"), tech, what
    if what == "pending":
        return line + "not gated yet", tech, what
    r = ratio_to_parent(head, parent)
    line += f"passed {us(head.score_us)} µs"
    if r is not None:
        label = {"gain": "gain", "slower": "SLOWER", "noise": "within noise"}[what]
        per = case_ratios(head, parent)
        line += f"; x{r:.2f} vs {parent.id} ({label})"
        if per:
            line += " — " + ", ".join(f"{k} x{v:.2f}" for k, v in per.items())
    pred = members[0].predicted_speedup
    if pred:
        line += f"; predicted x{pred:.2f}, measured " + (f"x{r:.2f}" if r is not None else "-")
    change = profile_change(profile(head), profile(parent)) if parent is not None else ""
    if change:
        line += f"; profile {change}"
    return line, tech, what


def ledger_lines(attempts: list["Attempt"], *, noise: float = 0.01,
                 profile: Callable[["Attempt"], dict | None] = lambda a: None) -> list[tuple[str, str, str]]:
    """(line, technique, verdict) per proposal, oldest first."""
    by_id = {a.id: a for a in attempts}
    return [_line(g, by_id, noise, profile) for g in _groups(attempts)]


def lessons(rows: list[tuple[str, str, str]]) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """(try, avoid, no effect): technique -> the verdicts of its proposals.  A technique that gained
    at least once is worth trying again; one that failed or slowed down and never gained is to
    avoid; one that only ever stayed within the noise had no measurable effect."""
    per: dict[str, list[str]] = {}
    for _, tech, what in rows:
        if what in ("duplicate", "pending"):
            continue
        per.setdefault(tech, []).append(what)
    try_, avoid, flat = {}, {}, {}
    for tech, ws in per.items():
        if "gain" in ws:
            try_[tech] = ws
        elif any(w in ("failed", "slower") for w in ws):
            avoid[tech] = ws
        else:
            flat[tech] = ws
    return try_, avoid, flat


def _count(ws: list[str]) -> str:
    names = {"gain": "gained", "slower": "slower", "failed": "failed", "noise": "within noise"}
    out = []
    for k in ("gain", "noise", "slower", "failed"):
        n = ws.count(k)
        if n:
            out.append(f"{n} {names[k]}")
    return ", ".join(out)


def ledger_section(attempts: list["Attempt"], *, noise: float = 0.01,
                   profile: Callable[["Attempt"], dict | None] = lambda a: None, task: "Task | None" = None,
                   limit: int = LEDGER_LINES) -> str:
    """The ledger and the lessons as one prompt section ("" before any proposal)."""
    rows = ledger_lines(attempts, noise=noise, profile=profile)
    if not rows:
        return ""
    shown = rows[-limit:]
    parts = ["# Attempt ledger (every proposal so far, oldest first: [technique], the kernel it started from, "
             f"verdict, speed vs that kernel overall and per case — gains and losses within ±{100 * noise:.0f}% "
             "are noise — the predicted speedup beside the measured one, and the profile change where both "
             "were profiled)"]
    if len(rows) > len(shown):
        older = rows[:len(rows) - len(shown)]
        parts.append(f"- ({len(older)} earlier proposals: {_count([w for _, _, w in older])}; counted in the lists "
                     "below)")
    parts += [line for line, _, _ in shown]
    try_, avoid, flat = lessons(rows)
    if try_:
        parts.append("\nTry again (these techniques gained; build on them from the current best): "
                     + "; ".join(f"{t} ({_count(ws)})" for t, ws in try_.items()))
    if avoid:
        parts.append("Avoid (failed or slower, never a gain; do not repeat them as they were done): "
                     + "; ".join(f"{t} ({_count(ws)})" for t, ws in avoid.items()))
    if flat:
        parts.append("No measurable effect so far: " + "; ".join(f"{t} ({_count(ws)})" for t, ws in flat.items()))
    return "\n".join(parts)


def start_section(parent: "PromptAttempt", best: "Attempt", diagnosis=None, refs: dict | None = None) -> str:
    """The kernel this proposal starts from when it is not the best (population search): its
    diagnosis (or that it has no profile yet) and its source, or where its code is an expert
    pattern's shown above, that name and its own ``// kforge:`` lines.  Edits apply to it."""
    from kernel_forge.search.prompt_blocks import MAX_SOURCE_CHARS, source_block

    rel = (f", x{best.score_us / parent.score_us:.2f} of the best's speed" if best.score_us and parent.score_us
           else "")
    lines = [f"# Start from {parent.id} for this proposal ({us(parent.score_us) if parent.score_us else '-'} µs{rel})",
             "The search develops several lines at once: improve this kernel in the direction below, not the "
             f"current best (shown above for reference). A ```diff block's edits apply to {parent.id}."]
    if parent.defines:
        lines.append("Run with: defines " + " ".join(f"{k}={v}" for k, v in sorted(parent.defines.items())))
    if diagnosis is not None and getattr(diagnosis, "cases", None):
        lines += ["## Its diagnosis", diagnosis.render()]
        if parent.profile is None:
            lines.append(f"(no Nsight Compute profile of {parent.id} yet: the figures above are the harness's own)")
    lines += ["## Its source", source_block(parent.source, refs or {}, MAX_SOURCE_CHARS)]
    return "\n".join(lines)
