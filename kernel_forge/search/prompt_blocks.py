"""How a kernel is shown in a prompt, whatever the section: the attempt as the prompt knows it
(:class:`PromptAttempt`), how much of each kind of source a prompt may hold, times and settings as
text, and a source block that names an expert pattern shown above instead of
repeating it."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernel_forge.model.clip import clip_kernel

MAX_SOURCE_CHARS = 12000      #: the best's (and a fix's) source
HISTORY_CHARS = 12000         #: all earlier correct kernels together
HISTORY_KERNEL_CHARS = 4000   #: one earlier correct kernel
FAILURES_CHARS = 9000         #: all recent failures together
FAILURE_CHARS = 3000          #: one failure's source or diff
RETRIEVED_CHARS = 8000        #: all kernels from other tasks together
PATTERN_CHARS = 10000         #: an expert pattern (kernel_forge/kernels), shown whole
REFERENCE_CHARS = 6000
HEADER = re.compile(r"^\s*//\s*kforge:")


@dataclass
class PromptAttempt:
    """What the prompt needs to know about one attempt."""

    id: str
    source: str
    passed: bool
    reason: str
    message: str
    score_us: float | None
    cases: list[dict] = field(default_factory=list)   # CaseResult.to_json(False) (holdout removed)
    compile_log: str = ""
    rationale: str = ""
    defines: dict = field(default_factory=dict)
    parent: str | None = None                         # the attempt it was derived from
    diff: str = ""                                    # unified diff of its source against the parent's
    launch: dict | None = None                        # the launch it ran with (Launch.to_json())
    direction: str = ""                               # the direction it was asked to take
    profile: dict | None = None                       # GateLike.profile() summary, when profiled



def normalise(source: str) -> str:
    """The source without ``// kforge:`` lines and with whitespace collapsed: two attempts with
    the same normalised source differ only in launch or defines."""
    body = "\n".join(l for l in source.splitlines() if not HEADER.match(l))
    return re.sub(r"\s+", " ", body).strip()


def us(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if x < 100 else f"{x:.1f}" if x < 10000 else f"{x:.0f}"


def defines_text(d: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted((d or {}).items()))


def field_of(obj, *names, default=None):
    for n in names:
        if isinstance(obj, dict) and n in obj:
            return obj[n]
        if not isinstance(obj, dict) and hasattr(obj, n):
            return getattr(obj, n)
    return default


def shown_cases(cases: list[dict]) -> list[dict]:
    return [c for c in cases if c.get("role") != "holdout"]


def per_case(a: PromptAttempt) -> str:
    rows = [f"{c['name']} {us((c.get('timing') or {}).get('median'))}" for c in shown_cases(a.cases)
            if c.get("timing")]
    return ", ".join(rows) + " µs" if rows else ""


def fence(source: str, lang: str = "cuda") -> str:
    return f"```{lang}\n{source.rstrip()}\n```"



def header_lines(source: str) -> list[str]:
    return [l.strip() for l in source.splitlines() if HEADER.match(l)]


def pattern_refs(retrieved) -> dict[str, tuple[str, set[str]]]:
    """normalised source -> (how to name an expert pattern the prompt shows in its archive section,
    its own ``// kforge:`` lines)."""
    out = {}
    for r in retrieved or ():
        name, source = field_of(r, "pattern", default="") or "", field_of(r, "source", default="") or ""
        if name and source:
            out[normalise(source)] = (f"the expert pattern {name} (under Kernels from the archive above)",
                                      {re.sub(r"\s+", " ", l) for l in header_lines(source)})
    return out


def source_block(source: str, refs: dict, limit: int, what: str = "Its code") -> str:
    """The fenced source, or where it is the code of an expert pattern shown above, that name and
    the ``// kforge:`` lines it has beyond the pattern's own (the same code is never shown twice)."""
    ref = refs.get(normalise(source))
    if ref is None:
        return fence(clip_kernel(source, limit))
    name, own = ref
    extra = [l for l in header_lines(source) if re.sub(r"\s+", " ", l) not in own]
    return (f"{what} is {name}, line for line, with its `// kforge:` lines moved to the top of the file; besides "
            "the pattern's own tune and constraint lines it has these (a ```diff block's SEARCH text is matched "
            "against the code):\n" + fence("\n".join(extra) or "// (no other kforge line)"))

