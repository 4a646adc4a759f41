"""The search over one kernel's settings, and what makes two kernels the same.

* :func:`expand` picks the settings of a proposal's tunables to gate (all of them within the
  budget, otherwise a seeded sample that always holds the declared defaults and each tunable's
  extremes), leaving out those already tried.
* :func:`refine` gives the settings one step away from the best setting of a tuned group.
* :func:`refine_groups` says which attempts of an iteration form such a group.
* :func:`kernel_key` is the identity of a kernel for de-duplication: its source with comments,
  whitespace and the ``// kforge:`` header normalised away, the launch it resolves to on every
  case, and its defines.  Two attempts with the same key compile and run the same kernel the
  same way, so the second one is not gated (verdict ``duplicate``).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
from typing import TYPE_CHECKING

from kernel_forge.model.candidate import Candidate
from kernel_forge.common.errors import KForgeError

if TYPE_CHECKING:        # the loop's record of an attempt (only its fields are read here)
    from kernel_forge.records.attempt import Attempt
    from kernel_forge.model.task import Task


#: a space whose tunables have more combinations than this is sampled, never listed
LIST_LIMIT = 50_000


def _dkey(d: dict) -> tuple:
    return tuple(sorted(d.items()))


# ------------------------------------------------------------------------------- settings

def configurations_to_try(candidate: Candidate, budget: int, *, seed: int = 0,
                          exclude: set[tuple] = frozenset()) -> list[dict]:
    """Settings of ``candidate``'s tunables to gate, at most ``budget`` of them, none of
    ``exclude`` (tuples of sorted ``(name, value)`` items)."""
    if math.prod(len(set(v)) for v in candidate.tunables.values()) > LIST_LIMIT:    # too large to list
        must = [dict(candidate.defines)] + [{**candidate.defines, name: v} for name, values in candidate.tunables.items()
                                            for v in (min(values), max(values))]
        drawn = candidate.sample_configurations(budget + len(exclude), seed=seed, must=must)
        return [d for d in drawn if _dkey(d) not in exclude][:budget]
    configs = [c for c in candidate.configurations() if _dkey(c) not in exclude]
    if len(configs) <= budget:
        return configs
    rng = random.Random(seed)
    chosen: list[dict] = []
    must = [dict(candidate.defines)]
    for name, values in candidate.tunables.items():
        for v in (min(values), max(values)):
            d = dict(candidate.defines)
            d[name] = v
            must.append(d)
    valid = {_dkey(c) for c in configs}
    for d in must:
        if _dkey(d) in valid and d not in chosen:
            chosen.append(d)
    rest = [c for c in configs if c not in chosen]
    rng.shuffle(rest)
    chosen.extend(rest[:max(0, budget - len(chosen))])
    return chosen[:budget]


def neighbours(candidate: Candidate, defines: dict) -> list[dict]:
    """Settings one step away from ``defines`` along each tunable (constraints applied)."""
    out = []
    for name, values in sorted(candidate.tunables.items()):
        vals = sorted(values)
        if defines.get(name) not in vals:
            continue
        i = vals.index(defines[name])
        for j in (i - 1, i + 1):
            if 0 <= j < len(vals):
                d = dict(defines)
                d[name] = vals[j]
                if candidate.with_defines(d).satisfies_constraints():
                    out.append(d)
    return out


def expand(candidate: Candidate, budget: int, *, seed: int = 0, exclude: set[tuple] = frozenset()) -> list[dict]:
    """The settings to gate for one proposal: its tunables' settings within ``budget``, or its one
    setting when it declares none; settings in ``exclude`` are left out (the list may be empty)."""
    if not candidate.tunables or candidate.dispatch is not None:   # a dispatch rule is gated whole
        return [] if _dkey(candidate.defines) in exclude else [dict(candidate.defines)]
    return configurations_to_try(candidate, budget, seed=seed, exclude=exclude)


def refine(candidate: Candidate, best_defines: dict, *, exclude: set[tuple] = frozenset()) -> list[dict]:
    """The neighbours of a group's best setting that were not tried yet."""
    return [d for d in neighbours(candidate, best_defines) if _dkey(d) not in exclude]


def refine_groups(batch: list["Attempt"]) -> list[list["Attempt"]]:
    """The passed settings of each tuned proposal in ``batch`` (one list per proposal).  Attempts
    that are themselves neighbours (their parent is in the batch) are left out, so a resumed
    iteration does not refine twice."""
    ids = {a.id for a in batch}
    groups: dict[tuple, list] = {}
    for a in batch:
        if a.parent in ids:
            continue
        if a.tunables and a.status == "passed" and a.score_us and not getattr(a, "dispatch", None):
            groups.setdefault((a.label, a.parent), []).append(a)     # a dispatch rule is not refined
    return list(groups.values())


# ------------------------------------------------------------------------------- identity

_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[A-Za-z_0-9.]+|\S')


_COMMENT_OR_LITERAL = re.compile(r'"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?|//[^\n]*|/\*.*?(?:\*/|\Z)', re.S)


def _drop_comment(m: re.Match) -> str:
    t = m.group(0)
    if t.startswith("//"):
        return ""
    if t.startswith("/*"):
        return "\n" * t.count("\n") or " "
    return t


def strip_comments(source: str) -> str:
    """``source`` without ``//`` and ``/* */`` comments (string and character literals kept;
    a block comment leaves its newlines, so line structure survives)."""
    return _COMMENT_OR_LITERAL.sub(_drop_comment, source)


@functools.lru_cache(maxsize=512)
def normalise_source(source: str) -> str:
    """The source as tokens: comments (the ``// kforge:`` header among them) and whitespace
    differences removed.  Preprocessor lines stay lines of their own."""
    lines: list[str] = []      # one per preprocessor line; the code between them as one line
    code: list[str] = []
    directive = False
    for line in strip_comments(source).splitlines():
        toks = _TOKEN.findall(line)
        if not toks:
            directive = False
            continue
        if toks[0] == "#" or directive:
            if code:
                lines.append(" ".join(code))
                code = []
            lines.append(" ".join(toks))
            directive = toks[-1] == "\\"
        else:
            code.append(" ".join(toks))
    if code:
        lines.append(" ".join(code))
    return "\n".join(lines)


def _number(v):
    return float(v) if isinstance(v, (int, float)) else v


def launch_key(candidate: Candidate, task: "Task") -> list:
    """The launch ``candidate`` runs with, resolved on every case of ``task`` (its own header or
    the manifest's); the expressions, whitespace removed, where one does not resolve."""
    launch = candidate.launch or task.launch
    if launch is None:
        return ["none"]
    try:
        out = []
        for case in task.cases:
            grid, block, smem = launch.resolve({**case.vars, **candidate.defines})
            out.append([list(grid), list(block), smem])
        return out
    except (KForgeError, ArithmeticError, ValueError):
        norm = lambda x: re.sub(r"\s+", "", str(x))  # noqa: E731
        return ["expr", [norm(x) for x in launch.grid], [norm(x) for x in launch.block], norm(launch.shared_mem)]


def kernel_key(candidate: Candidate, task: "Task") -> str:
    """sha256 of (normalised source, resolved launch, defines): equal keys are the same kernel."""
    defines = sorted((k, _number(v)) for k, v in candidate.defines.items())
    parts = [normalise_source(candidate.source), launch_key(candidate, task), defines]
    if candidate.dispatch is not None:       # settings per shape: the rule is part of the kernel
        parts.append(candidate.dispatch.to_json())
    blob = json.dumps(parts)
    return hashlib.sha256(blob.encode()).hexdigest()


def body_key(candidate: Candidate) -> str:
    """sha256 of the normalised source alone (the settings of one tuned kernel share it)."""
    return hashlib.sha256(normalise_source(candidate.source).encode()).hexdigest()
