"""The context window, checked before every model call (issue 32 item 5).

A request must fit its model's window (the capability table's ``context``, or ``--context-tokens N``
for a server the table cannot know: llama.cpp, Ollama, vLLM ...): its prompt, counted
conservatively (the JSON body's characters / 3, :func:`~.budget.estimate_tokens`), plus the output
limit it asks for.  What does not fit is made to fit by rule, in this order, and the call's plan
says what was done:

1. the output limit is lowered to the room left, where that room still holds :data:`MIN_OUTPUT`
   tokens (a kernel with a short explanation);
2. the proposal's prompt loses whole sections, lowest priority first (:data:`DROP_ORDER`: archive
   examples, the attempt ledger, earlier kernels, recent failures, the architecture's facts, the
   expert pattern) -- never
   the task, the reference, the best kernel, the kernel it starts from (a crossover's two
   kernels), the fix target, the hints, the direction or the job;
3. otherwise the call is not made: :class:`ContextRefused` names the sizes.

No request is sent to fail with an HTTP 400 for its length.
"""
from __future__ import annotations

import re

#: the fewest output tokens a call may be left with when its limit is lowered to fit the window
MIN_OUTPUT = 4096

#: prompt sections dropped to fit the window, lowest priority first (the start of their "# " heading)
DROP_ORDER = (
    "# Kernels from the archive",
    "# Examples from other tasks",
    "# Attempt ledger",
    "# Earlier correct kernels",
    "# Recent failures",
    "# sm_",                  # the architecture's facts (# sm_90 (Hopper) facts)
    "# The expert pattern",
)


class ContextRefused(Exception):
    """A call whose prompt cannot be made to fit the model's context window (``str()``: the sizes)."""


def sections(text: str) -> list[str]:
    """``text`` split before each top-level ``# `` heading that starts a paragraph."""
    return re.split(r"(?<=\n\n)(?=# )", text) if text else []


def droppable(section: str) -> int | None:
    """The rank of ``section`` in :data:`DROP_ORDER` (None: never dropped)."""
    for rank, head in enumerate(DROP_ORDER):
        if section.startswith(head):
            return rank
    return None


def heading(section: str) -> str:
    return section.split("\n", 1)[0].strip()


def cut(text: str, chars_over: int) -> tuple[str, list[str]]:
    """``text`` without its lowest-priority sections until ``chars_over`` characters are gone (or
    nothing more may go), and the headings dropped, in the order dropped."""
    parts = sections(text)
    ranked = sorted((r, -i) for i, s in enumerate(parts) if (r := droppable(s)) is not None)
    dropped: set[int] = set()
    names: list[str] = []
    removed = 0
    for _, neg in ranked:
        if removed >= chars_over:
            break
        i = -neg
        dropped.add(i)
        removed += len(parts[i])
        names.append(heading(parts[i]))
    kept = "".join(p for i, p in enumerate(parts) if i not in dropped)
    return kept.rstrip("\n") if dropped else text, names
