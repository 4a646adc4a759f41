"""Several kernels in one file, one chosen per shape: a composite of whole sources.

A dispatch rule (:mod:`kernel_forge.model.dispatch`) varies one source's settings.  When one kernel
is the fastest on the large cases and another on the small ones (a tensor-core GEMM and a SIMT
GEMM), no setting of either gets every case's best.  :func:`compose` writes the kernels into one
source, each behind ``#if KF_IMPL == i``, with the launch of each as a conditional expression on
``KF_IMPL`` and its constraints guarded by it; a dispatch rule then picks ``KF_IMPL`` (and that
kernel's setting) per shape, and the gate checks every branch as for any rule.

The tunables are the union of the members' (a name two members share lists both members'
values): a composite is read as a dispatch of chosen settings, not a space to search.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernel_forge.model.candidate import _HEADER, Candidate, Launch
from kernel_forge.common.errors import CandidateError

#: the define that picks a member
IMPL = "KF_IMPL"


@dataclass(frozen=True)
class Member:
    """One kernel of a composite: its candidate and the launch it runs with."""

    candidate: Candidate
    launch: Launch


def _pick(values: Sequence, default) -> str | int:
    """``a if KF_IMPL == 0 else (b if KF_IMPL == 1 else c)``; one value where all agree."""
    vals = [default if v is None else v for v in values]
    if all(str(v) == str(vals[0]) for v in vals):
        return vals[0]
    out = f"({vals[-1]})"
    for i in range(len(vals) - 2, -1, -1):
        out = f"({vals[i]}) if {IMPL} == {i} else {out}"
    return out


def _body(cand: Candidate) -> str:
    return "\n".join(l for l in cand.source.splitlines() if not _HEADER.match(l)).strip("\n")


def compose(candidates: Sequence[Candidate], default_launch: Launch | None, *, name: str = "composite") -> Candidate:
    """One candidate holding every one of ``candidates`` (two or more), member ``i`` compiled where
    ``KF_IMPL == i``.  ``default_launch`` (the manifest's) stands for a member without its own.
    Defines: member 0's.  A CandidateError where the members cannot share a file (a template
    instance line, a cooperative launch in one and not another, or no launch for one)."""
    if len(candidates) < 2:
        raise CandidateError("a composite needs two or more kernels", file=name)
    members = []
    for c in candidates:
        if IMPL in c.tunables or IMPL in c.defines:
            raise CandidateError(f"{c.name} already uses {IMPL}", file=c.name)
        if any((m := _HEADER.match(l)) and m.group(1).startswith("instance") for l in c.source.splitlines()):
            raise CandidateError(f"{c.name} names a template instance; a composite holds plain kernels", file=c.name)
        launch = c.launch or default_launch
        if launch is None:
            raise CandidateError(f"{c.name} has no launch and the task gives none", file=c.name)
        members.append(Member(c, launch))
    if len({m.launch.cooperative for m in members}) > 1:
        raise CandidateError("a cooperative kernel cannot share a composite with a plain one", file=name)
    dims = max(max(len(m.launch.grid), len(m.launch.block)) for m in members)
    pad = lambda t: tuple(t) + (1,) * (dims - len(t))  # noqa: E731
    grid = tuple(_pick([pad(m.launch.grid)[d] for m in members], 1) for d in range(dims))
    block = tuple(_pick([pad(m.launch.block)[d] for m in members], 1) for d in range(dims))
    smem = _pick([m.launch.shared_mem for m in members], 0)
    tunables: dict[str, tuple] = {IMPL: tuple(range(len(members)))}
    for m in members:
        for k, values in m.candidate.tunables.items():
            tunables[k] = tuple(dict.fromkeys(tunables.get(k, ()) + tuple(values)))
    constraints = tuple(f"{IMPL} != {i} or ({c})" for i, m in enumerate(members) for c in m.candidate.constraints)
    parts = []
    for i, m in enumerate(members):
        parts.append(f"#{'if' if i == 0 else 'elif'} {IMPL} == {i}   // {m.candidate.name}")
        parts.append(_body(m.candidate))
    parts.append(f"#else\n#error \"{IMPL} names no kernel of this composite\"\n#endif")
    source = (f"// Composite of {len(members)} kernels, one per shape (kernel_forge.model.composite): "
              f"{IMPL} picks the kernel, a dispatch rule picks {IMPL} per case.\n" + "\n".join(parts) + "\n")
    defines = {**candidates[0].defines, IMPL: 0}
    return Candidate(source=source, name=name, launch=Launch(grid, block, smem, members[0].launch.cooperative),
                     tunables=tunables, defines=defines, constraints=constraints)


def member_defines(index: int, defines: dict) -> dict:
    """A member's setting as the composite's: its defines with ``KF_IMPL``."""
    return {**defines, IMPL: index}
