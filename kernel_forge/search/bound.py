"""The built-in tuner's bound patterns: the task's kind read from its reference
(:func:`kernel_forge.kinds.identify`), the kind's patterns instantiated for the task's own
signature (:func:`kernel_forge.kinds.bind.instantiate`) and written to files the tuner proposes.

Each bound pattern is gated before its settings are searched: the tuner first proposes
:func:`gate_source` of it (its tunables pinned to their defaults, labelled :func:`gate_label`),
and only when that attempt passed does it propose the template itself.  A binding that fails the
gate is dropped; its failed attempt, with the verdict, stays in the run's history.

Nothing here raises for a task of no known kind or a reference that misbehaves: the notes say
what happened, and the tuner goes on with the task's own templates.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from kernel_forge.common.writes import WriteFailed, write_text

#: the prefix of the label under which a bound pattern's first, pinned setting is gated
GATE_PREFIX = "gate:"


@dataclass
class BoundSet:
    templates: list[Path] = field(default_factory=list)    #: files of the bound patterns (with tunables)
    notes: list[str] = field(default_factory=list)         #: what was identified, and what could not be bound
    match: object | None = None                            #: the kinds.Match, when one was found


def folder() -> Path:
    """Where bound patterns are written (beside the compile cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernel_forge" / "bound"


def gate_label(path: Path) -> str:
    return GATE_PREFIX + Path(path).name


def is_bound_label(label: str) -> bool:
    """Whether an attempt's label names a bound pattern (its gate at the default setting, or a
    setting the tuner searched), not the task's own kernel or templates."""
    from kernel_forge.kinds.bind import LABEL_PREFIX

    return label.startswith((GATE_PREFIX, LABEL_PREFIX))


def gate_source(source: str) -> str:
    """The bound pattern with each tunable pinned to its first value (its default): every
    ``tune NAME = [a, ...]`` header line becomes ``define NAME = a``, and the constraints go."""
    import re

    out = []
    for ln in source.splitlines():
        m = re.match(r"^\s*//\s*kforge:\s*tune\s+(\w+)\s*=\s*\[\s*([^,\]]+)", ln)
        if m:
            out.append(f"// kforge: define {m.group(1)} = {m.group(2).strip()}")
        elif not re.match(r"^\s*//\s*kforge:\s*constraint\b", ln):
            out.append(ln)
    return "\n".join(out) + "\n"


def _has_pattern_of(kind: str, templates) -> bool:
    from kernel_forge.kernels.library import patterns

    mine = {p.path for p in patterns() if p.kind == kind}
    return any(Path(t).resolve() in mine for t in templates)


def bound_templates(task, templates=(), *, where: Path | None = None) -> BoundSet:
    """The bound patterns for ``task`` (none when the task's templates already hold an expert pattern
    of its kind written for its exact signature)."""
    from kernel_forge.common.errors import KForgeError
    from kernel_forge.kinds import KindMismatch, identify
    from kernel_forge.kinds.bind import Unbindable, instantiate

    out = BoundSet()
    try:
        found = identify(task)
    except KindMismatch as exc:
        out.notes.append(f"kind: {exc}")
        return out
    except (KForgeError, OSError, ValueError) as exc:
        out.notes.append(f"kind: not identified ({getattr(exc, 'message', exc)})")
        return out
    out.notes.append(found.line())
    if found.match is None:
        return out
    out.match = found.match
    if _has_pattern_of(found.match.kind, templates):
        out.notes.append(f"bound patterns: not needed (the task's templates hold the {found.match.kind} pattern)")
        return out
    try:
        bound = instantiate(task, found.match)
    except Unbindable as exc:
        out.notes.append(f"bound patterns: none ({exc})")
        return out
    base = where or folder()
    for b in bound:
        digest = hashlib.sha256(b.source.encode()).hexdigest()[:16]
        path = base / digest / b.label
        try:
            if not path.is_file() or path.read_text(encoding="utf-8") != b.source:
                write_text(path, b.source)
        except (WriteFailed, OSError, UnicodeDecodeError) as exc:
            why = exc.message if isinstance(exc, WriteFailed) else str(exc)
            out.notes.append(f"bound patterns: cannot write {path} ({why})")
            continue
        out.templates.append(path)
    if out.templates:
        out.notes.append("bound patterns: " + ", ".join(p.name for p in out.templates)
                         + " (each gated at its default setting before its settings are searched)")
    return out
