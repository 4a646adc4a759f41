"""What a prompt shows of failed attempts: the recent failures (each its reason, the first
mismatches on shown cases, compiler errors at their lines, and its change from its parent) and a
failed attempt to fix (whole), each with the launch and settings it ran with.  Hidden cases are never named: a failure on one says so and no more."""
from __future__ import annotations

import difflib
import re

from kernel_forge.model.clip import clip_source
from kernel_forge.model.task import Task
from kernel_forge.model.verdict import REASONS
from kernel_forge.search.prompt_blocks import (FAILURE_CHARS, FAILURES_CHARS, MAX_SOURCE_CHARS, PromptAttempt,
                                               defines_text, fence, normalise, shown_cases)


def launch_line(task: Task, a: PromptAttempt) -> str:
    parts = []
    if a.launch:
        fmt = lambda t: "[" + ", ".join(str(x) for x in t) + "]"  # noqa: E731
        parts.append(f"launch grid {fmt(a.launch['grid'])}, block {fmt(a.launch['block'])}"
                     + (f", shared_mem {a.launch.get('shared_mem')}" if a.launch.get("shared_mem") not in (0, "0", None) else ""))
    elif task.launch is not None:
        parts.append("the task's default launch")
    if a.defines:
        parts.append(f"defines {defines_text(a.defines)}")
    return "; ".join(parts)



def _hidden_names(task: Task) -> set[str]:
    return {c.name for c in task.cases if c.role == "holdout"}


def _reason(a: PromptAttempt) -> str:
    code = a.reason
    meaning = REASONS.get(a.reason) or ("it passed the shown cases but failed on hidden cases (sizes and values "
                                        "withheld)" if a.reason == "holdout_failed" else "")
    return f"{code}" + (f" ({meaning})" if meaning else "")


def _compile_errors(a: PromptAttempt) -> list[str]:
    from kernel_forge.gpu.nvrtc import error_lines

    src = a.source.splitlines()
    out = []
    for line, msg in error_lines(a.compile_log or "")[:5]:
        out.append(f"- line {line}: {msg}")
        if 0 < line <= len(src):
            out.append(f"  {line:5d} | {src[line - 1].rstrip()}")
    if not out and a.compile_log:
        out = [f"  {l.strip()}" for l in a.compile_log.splitlines() if "error" in l][:5]
    return out


def _case_vars(task: Task, name: str) -> str:
    try:
        c = task.case(name)
    except KeyError:
        return ""
    if c.role == "holdout":
        return ""
    return ", ".join(f"{k}={v}" for k, v in c.vars.items())


def _mismatches(task: Task, a: PromptAttempt) -> list[str]:
    out = []
    for c in shown_cases(a.cases):
        if c.get("passed", True) or c.get("reason") in ("skipped", None):
            continue
        size = _case_vars(task, c["name"])
        out.append(f"- case {c['name']}" + (f" ({size})" if size else "") + f": {c.get('reason')}: "
                   + (c.get("message") or "").strip()[:400])
        for o in c.get("outputs") or []:
            first = o.get("first") or []
            if not o.get("ok", True) and first:
                pts = "; ".join(f"[{', '.join(map(str, f['index']))}] got {f['actual']}, expected {f['expected']}"
                                for f in first[:4])
                out.append(f"  first mismatches of {o['name']}: {pts}")
        if len(out) >= 8:
            break
    return out


def _parent_source(a: PromptAttempt, known: dict[str, str]) -> str | None:
    return known.get(a.parent) if a.parent else None


def _failure_body(task: Task, a: PromptAttempt, known: dict[str, str], *, limit: int, complete: bool) -> str:
    lines = []
    hidden = _hidden_names(task)
    message = a.message.strip()
    if a.reason == "holdout_failed" or any(re.search(rf"\bcase {re.escape(h)}\b", message) for h in hidden):
        message = "failed on hidden cases (their sizes and values are withheld)"
    launch = launch_line(task, a)
    if a.parent:
        lines.append(f"Derived from {a.parent}" + (f"; run with {launch}." if launch else "."))
    elif launch:
        lines.append(f"Run with {launch}.")
    if a.direction:
        lines.append(f"Its direction was: {a.direction}")
    if a.rationale:
        lines.append(f"Its rationale: {a.rationale[:200]}")
    if a.reason == "compile_error":
        errs = _compile_errors(a)
        if errs:
            lines.append("Compiler errors (line numbers are the file's, shown below):")
            lines += errs
        else:
            lines.append(f"Gate: {message.splitlines()[0] if message else ''}")
    else:
        cases = _mismatches(task, a)
        if message and not cases and a.reason != "holdout_failed":
            lines.append("Gate: " + " ".join(message.splitlines()[:4])[:600])
        lines += cases
    diff = a.diff
    parent_src = _parent_source(a, known)
    if not diff and parent_src is not None:
        diff = "".join(difflib.unified_diff(parent_src.splitlines(True), a.source.splitlines(True),
                                            fromfile=f"{a.parent}.cu", tofile=f"{a.id}.cu", n=2))
    if not complete and diff and len(diff) < len(a.source):
        lines.append(f"Its change from {a.parent or 'its parent'}:")
        lines.append(fence(clip_source(diff.rstrip("\n"), limit), "diff"))
    else:
        lines.append("Its source:" if not complete else "Its complete source:")
        lines.append(fence(clip_source(a.source, limit)))
    return "\n".join(lines)


def failures_section(task: Task, failures: list[PromptAttempt], known: dict[str, str]) -> str:
    seen, parts, budget = set(), [], FAILURES_CHARS
    for a in reversed(failures):           # the most recent first, when the budget runs out
        key = normalise(a.source) + "|" + defines_text(a.defines)
        if key in seen:
            continue
        seen.add(key)
        body = _failure_body(task, a, known, limit=min(FAILURE_CHARS, max(600, budget)), complete=False)
        if budget - len(body) < 0 and parts:
            break
        budget -= len(body)
        parts.insert(0, f"## {a.id}: {_reason(a)}\n{body}")
    if not parts:
        return ""
    overview = []
    for a in failures:
        first = (a.message.strip().splitlines() or [""])[0]
        if a.reason == "holdout_failed" or any(re.search(rf"\bcase {re.escape(h)}\b", first) for h in _hidden_names(task)):
            first = "failed a hidden case" if a.reason == "holdout_failed" else "failed (details withheld)"
        overview.append(f"- {a.id}: {a.reason}" + (f": {first[:160]}" if first else ""))
    return ("# Recent failures (do not repeat these mistakes)\n" + "\n".join(overview) + "\n\n"
            + "\n\n".join(parts))


def fix_section(task: Task, fix: PromptAttempt, known: dict[str, str]) -> str:
    return (f"# Fix this failed attempt: {fix.id}\nIt failed with {_reason(fix)}. Find the bug, keep what it was "
            f"trying to do, and submit the corrected kernel (a ```diff block's edits apply to {fix.id}).\n"
            + _failure_body(task, fix, known, limit=MAX_SOURCE_CHARS, complete=True))

