"""A kernel with a dispatch rule through a gate: one sub-evaluation per setting, merged.

A gate runs one setting at a time (one compile, one module, one resolved launch per case).  A
candidate that carries a rule (:mod:`kernel_forge.model.dispatch`) is split into its variants
(:mod:`kernel_forge.model.dispatch_variants`) — the same source with each distinct setting of the
rule — and each variant is evaluated on the cases the rule gives it (the gate's ``only``).  Correctness, performance and holdout cases alike
run with the rule's pick.  The verdicts are merged into one :class:`Evaluation` in the task's
case order; every case records the line it ran with (``CaseResult.variant``) and the evaluation
the rule itself (``Evaluation.dispatch``), so the worker protocol and every reader of an
evaluation are unchanged.  A variant that fails before its cases run (a compile error) fails the
kernel; a case fails with its variant named.

Any gate whose ``evaluate`` takes ``only`` works: the real :class:`~kernel_forge.gate.gate.Gate`
(which calls :func:`evaluate_rule` for a candidate with a rule) and the test suite's scripted
gate.  It lives in gate/ because it runs a gate: the model's floor knows the variants only.
"""
from __future__ import annotations

import math

from kernel_forge.common.stats import geomean
from kernel_forge.model.candidate import Candidate
from kernel_forge.model.dispatch import problem, variant_record
from kernel_forge.model.dispatch_variants import plan, variant
from kernel_forge.model.verdict import CaseResult, Evaluation

__all__ = ["evaluate_rule", "profile_rule"]


def _line(rule, index: int) -> str:
    b = rule.branches[index]
    return f"dispatch line `{b.condition} -> {b.setting_text()}`"


def _add_cost(total: dict, part: dict | None) -> None:
    for k, v in (part or {}).items():
        if isinstance(v, dict):
            _add_cost(total.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            total[k] = round(total.get(k, 0) + v, 6)


def evaluate_rule(gate, task, candidate: Candidate, *, roles=("correctness", "performance"), kind: str = "candidate",
                  only: set[str] | None = None, fail_fast: bool = False, **kw) -> Evaluation:
    """``candidate`` (which carries a rule) on the cases of ``roles`` (and ``only``), each case with
    the setting its variables pick: one ``gate.evaluate`` per setting, merged (see the module)."""
    rule = candidate.dispatch
    merged = Evaluation(label=candidate.name, passed=False, defines=candidate.compile_defines(),
                        sha256=candidate.sha256, kind=kind, dispatch=rule.to_json())
    found = problem(task, rule)
    if found is not None:                 # before any compile: no GPU time
        message, line = found
        where = f"{candidate.name}:{line}: " if line else f"{candidate.name}: "
        merged.reason, merged.message = "bad_candidate", where + message
        return merged
    cases = [c for c in task.cases if c.role in roles and (only is None or c.name in only)]
    picks, groups = plan(task, candidate, cases)
    if not groups:                        # no case of these roles: the default is still compiled
        groups = [(rule.default.defines, [])]
    by_name: dict[str, CaseResult] = {}
    early: tuple[str, str, dict | None] | None = None     # a variant that failed before its cases
    other: tuple[str, str] | None = None                   # one that failed after them (sanitizer)
    compiles: list[dict] = []
    cost: dict = {}
    stopped = False
    for setting, names in groups:
        if stopped:
            for n in names:
                by_name[n] = CaseResult(n, task.case(n).role, False, "skipped")
            continue
        sub = gate.evaluate(variant(candidate, setting), roles=roles, kind=kind, only=set(names), **kw)
        merged.seconds += sub.seconds
        merged.device = sub.device if merged.device is None else merged.device
        _add_cost(cost, sub.cost)
        branches = sorted({picks[n] for n in names}) or [len(rule.branches) - 1]
        compiles.append({"branches": branches, "defines": dict(sorted(setting.items())), "compile": sub.compile})
        mine = [c for c in sub.cases if c.name in names]
        for c in mine:
            c.variant = variant_record(rule, picks[c.name])
            by_name[c.name] = c
        if not sub.passed:
            label = _line(rule, branches[0])
            if not mine and early is None:
                early = (sub.reason, f"{label}: {sub.message}", sub.compile)
            elif mine and all(c.passed for c in mine) and other is None:
                other = (sub.reason, f"{label}: {sub.message}")
            stopped = fail_fast
    merged.cases = [by_name[c.name] for c in cases if c.name in by_name]
    merged.cost = cost or None
    base = early[2] if early is not None else next((x["compile"] for x in compiles if x["compile"]), None)
    if base is not None or any(x["compile"] for x in compiles):
        merged.compile = {**(base or {"log": ""}), "variants": compiles}
    failures = merged.failures()
    if early is not None:
        merged.reason, merged.message = early[0], early[1]
    elif failures:
        first = failures[0]
        merged.reason = first.reason
        merged.message = f"case {first.name} ({_line(rule, picks[first.name])}): {first.message}"
    elif other is not None:
        merged.reason, merged.message = other
    elif any(c.reason == "skipped" for c in merged.cases):
        merged.reason, merged.message = "skipped", "not run because an earlier case failed"
    else:
        merged.passed, merged.reason = True, "passed"
        perf = [c.timing.median for c in merged.cases if c.role == "performance" and c.timing]
        if perf and len(perf) == len([c for c in merged.cases if c.role == "performance"]) \
                and all(v > 0 and math.isfinite(v) for v in perf):
            merged.score_us = geomean(perf)
    return merged


def profile_rule(gate, task, candidate: Candidate, cases: list[str]) -> dict:
    """``gate.profile`` of each setting on the cases it runs, merged into one answer (cases by name;
    seconds summed; reasons of the settings that could not be profiled joined; ``instruction_mixes``:
    case -> the mix of the setting that case runs with)."""
    known = {c.name: c for c in task.cases}
    chosen = [known[n] for n in cases if n in known]
    if len(chosen) != len(cases):         # let the gate say which name is unknown
        return gate.profile(variant(candidate, candidate.dispatch.default.defines), cases)
    _, groups = plan(task, candidate, chosen)
    parts = [gate.profile(variant(candidate, setting), names) for setting, names in groups]
    if not parts:
        return {"available": False, "reason": "no case to profile", "tool": "", "seconds": 0.0, "cases": {}}
    ok = [p for p in parts if p.get("available")]
    out = {"available": bool(ok), "reason": "; ".join(p.get("reason", "") for p in parts if not p.get("available")),
           "tool": (ok or parts)[0].get("tool", ""), "seconds": round(sum(p.get("seconds") or 0.0 for p in parts), 3),
           "cases": {k: v for p in ok for k, v in (p.get("cases") or {}).items()}}
    notes = [n for p in parts for n in (p.get("notes") or [])]
    if notes:
        out["notes"] = notes
    raw = [p["raw"] for p in parts if p.get("raw")]
    if raw:
        out["raw"] = "\n".join(raw)
    for k in ("command",):
        if ok and k in ok[0]:
            out[k] = ok[0][k]
    # each case keeps the instruction mix of the setting it runs with (a rule's settings differ in
    # tiles and unrolling, so one setting's mix would misname the limit of the others' cases)
    mixes = {n: p["instruction_mix"] for (_, names), p in zip(groups, parts) if p.get("instruction_mix")
             for n in names}
    if mixes:
        out["instruction_mixes"] = mixes
    missing = sorted({m for p in ok for m in (p.get("metrics_missing") or [])})
    if missing:
        out["metrics_missing"] = missing
    return out
