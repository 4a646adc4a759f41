"""A proposal as one candidate: its source with the launch and tunables its tool arguments give,
refused (:class:`LaunchConflict`) where the source's ``// kforge:`` header says otherwise."""
from __future__ import annotations

import re

from kernel_forge.common.errors import CandidateError
from kernel_forge.model.candidate import Candidate, Launch, parse_candidate
from kernel_forge.proposers.base import Proposal


class LaunchConflict(CandidateError):
    """The source's ``// kforge:`` header and the proposal's tool arguments disagree."""


def _launch_text(launch: Launch) -> str:
    fmt = lambda t: "[" + ", ".join(str(x) for x in t) + "]"  # noqa: E731
    return (f"grid {fmt(launch.grid)}, block {fmt(launch.block)}, shared_mem {launch.shared_mem}"
            + (", cooperative" if launch.cooperative else ""))


def _same_launch(a: Launch, b: Launch) -> bool:
    """The header's launch ``a`` and the tool's ``b`` agree (a tool launch that does not ask for a
    cooperative launch leaves the header's choice)."""
    norm = lambda t: tuple(re.sub(r"\s+", "", str(x)) for x in t) + ("1",) * (3 - len(t))  # noqa: E731
    return ((norm(a.grid), norm(a.block), norm((a.shared_mem,))) == (norm(b.grid), norm(b.block), norm((b.shared_mem,)))
            and (a.cooperative or not b.cooperative))


def candidate_from_proposal(p: Proposal, name: str) -> Candidate:
    """A proposal's source plus its tool ``launch``/``tunables`` as one candidate.  Where the
    source's ``// kforge:`` header says otherwise, :class:`LaunchConflict` (the model is told)."""
    cand = parse_candidate(p.source, name=name)
    launch = cand.launch
    if p.launch:
        tool = Launch(tuple(p.launch["grid"]), tuple(p.launch["block"]), p.launch.get("shared_mem", 0),
                      bool(p.launch.get("cooperative", False)))
        if launch is None:
            launch = tool
        elif not _same_launch(launch, tool):
            raise LaunchConflict(f"the source's // kforge: header says {_launch_text(launch)} but the tool's "
                                 f"launch says {_launch_text(tool)}; nothing was run",
                                 file=name, hint="give the launch once (header or tool argument), or make them agree")
    tunables = dict(cand.tunables)
    defines = dict(cand.defines)
    for k, values in (p.tunables or {}).items():
        if k in tunables:
            if [float(v) for v in tunables[k]] != [float(v) for v in values]:
                raise LaunchConflict(f"tunable {k}: the source's // kforge: header says {list(tunables[k])} but "
                                     f"the tool's tunables say {list(values)}; nothing was run", file=name,
                                     hint="declare each tunable once, or the same values in both places")
            continue
        tunables[k] = tuple(values)
        defines.setdefault(k, values[0])
    return Candidate(source=cand.source, name=name, launch=launch, tunables=tunables, defines=defines,
                     constraints=cand.constraints, dispatch=cand.dispatch)
