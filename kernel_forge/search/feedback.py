"""What the loop chooses to show the model, as pure functions over its attempt records.

:func:`choose_shown` picks, besides the current best: earlier correct kernels (one per distinct
kernel, its fastest setting, fastest first, never the best's kernel again, bounded in count and in
characters of source), recent failures (one per kernel) and, every ``crossover_every``
iterations, two parents to combine (the best and a distinct runner-up; never the task's initial
kernel while another passed kernel exists).  :func:`prompt_attempt` fills a
:class:`~kernel_forge.search.prompt_blocks.PromptAttempt` completely (diff from the parent, defines, launch,
line-mapped compile errors, shown cases); how it is rendered is prompts.py's business.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel_forge.search.prompt_blocks import PromptAttempt
from kernel_forge.model.verdict import NOT_THE_KERNELS_FAULT

if TYPE_CHECKING:
    from kernel_forge.records.attempt import Attempt

_LOG_LINE = re.compile(r"\((\d+)\): (?:catastrophic )?(?:error|warning)")
HIDDEN = "failed a hidden case"


def map_compile_log(log: str, source: str) -> str:
    """NVRTC's log with the kernel line each error names printed under it (``NNNN | text``)."""
    lines = source.splitlines()
    out = []
    for entry in log.splitlines():
        out.append(entry)
        m = _LOG_LINE.search(entry)
        if m and 0 < int(m.group(1)) <= len(lines):
            out.append(f"    {int(m.group(1)):4d} | {lines[int(m.group(1)) - 1]}")
    return "\n".join(out)


def prompt_attempt(a: "Attempt", *, source: str, parent_source: str | None = None,
                   default_launch: dict | None = None, profile: dict | None = None) -> PromptAttempt:
    """Everything the prompt may show of one attempt (holdout cases and details never)."""
    ev = a.evaluation or {}
    diff = ""
    if parent_source is not None and parent_source != source:
        diff = "".join(difflib.unified_diff(parent_source.splitlines(True), source.splitlines(True),
                                            f"{a.parent}.cu", f"{a.id}.cu"))
    return PromptAttempt(id=a.id, source=source, passed=a.status == "passed", reason=a.reason,
                         message=HIDDEN if a.reason == "holdout_failed" else a.message, score_us=a.score_us,
                         cases=[c for c in ev.get("cases", []) if c.get("role") != "holdout"],
                         compile_log=map_compile_log((ev.get("compile") or {}).get("log", ""), source),
                         rationale=a.rationale, defines=dict(a.defines), parent=a.parent, diff=diff,
                         launch=a.launch or default_launch, direction=a.direction, profile=profile)


@dataclass
class Shown:
    history: list            # Attempt: earlier correct kernels, fastest first
    failures: list           # Attempt: recent failures, oldest first
    crossover: tuple | None  # (Attempt, Attempt) or None


def choose_shown(attempts: list["Attempt"], best: "Attempt", initial: "Attempt | None", *, iteration: int,
                 body: Callable[["Attempt"], str], size: Callable[["Attempt"], int], history_in_prompt: int,
                 history_chars: int, failures_in_prompt: int, crossover_every: int) -> Shown:
    """What the prompt of ``iteration`` shows besides ``best``; ``body`` names an attempt's kernel
    (settings of one kernel share it), ``size`` is the length of its source."""
    fastest: dict[str, "Attempt"] = {}
    for a in sorted((a for a in attempts if a.status == "passed" and a.score_us), key=lambda a: a.score_us):
        fastest.setdefault(body(a), a)
    fastest.pop(body(best), None)
    crossover = None
    if crossover_every and iteration % crossover_every == 0:
        from kernel_forge.search.lineage import wins_over

        first = best if best is not initial else next((a for a in fastest.values() if a is not initial), None)
        # a second parent faster than the first on some case, and the first faster on another
        other = next((a for a in fastest.values() if a is not initial and a is not first and first is not None
                      and wins_over(a, first) and wins_over(first, a)), None)
        pair = [first, other] if first is not None and other is not None else []
        if len(pair) >= 2:
            crossover = (pair[0], pair[1])
            for a in crossover:
                fastest.pop(body(a), None)
    history, chars = [], 0
    for a in list(fastest.values())[:history_in_prompt]:
        if chars + size(a) > history_chars:
            break
        history.append(a)
        chars += size(a)
    failures: dict[str, "Attempt"] = {}
    for a in reversed(attempts):   # a harness or reference failure is not the kernel's: never shown as one
        if a.status == "failed" and a.reason not in NOT_THE_KERNELS_FAULT and len(failures) < failures_in_prompt:
            failures.setdefault(body(a), a)
    return Shown(history=history, failures=list(reversed(list(failures.values()))), crossover=crossover)
