"""The run's kernels by content (:class:`KernelIndex`): which attempt first had each kernel (the
de-duplication index), which tunable body each attempt's kernel has, and the kernel of an attempt
read back from the run folder."""
from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_forge.common.errors import CandidateError
from kernel_forge.model.candidate import Candidate, parse_candidate
from kernel_forge.records.attempt import Attempt
from kernel_forge.search import spaces

if TYPE_CHECKING:
    from kernel_forge.evidence.run_dir import RunDir
    from kernel_forge.model.task import Task


class KernelIndex:
    """Derived from the attempts, never saved: rebuilt on resume by :meth:`remember` of each."""

    def __init__(self, task: Task, run_dir: RunDir):
        self.task, self.run_dir = task, run_dir
        self.seen: dict[str, str] = {}     # spaces.kernel_key -> the first attempt with that kernel
        self.bodies: dict[str, str] = {}   # attempt id -> spaces.body_key of its kernel

    def source(self, a: Attempt) -> str:
        """The attempt's kernel as the run folder holds it."""
        return (self.run_dir.path / a.source_file).read_text(encoding="utf-8")

    def source_or_none(self, a: Attempt | None) -> str | None:
        """The attempt's kernel for a diagnosis (None when it has none or it cannot be read)."""
        try:
            return self.source(a) if a is not None and a.source_file else None
        except (OSError, UnicodeDecodeError):
            return None

    def candidate(self, a: Attempt) -> Candidate:
        return parse_candidate(self.source(a), name=f"{a.id}.cu")

    def body(self, a: Attempt) -> str:
        """The key of the attempt's kernel body (its id when it has none: it never parsed)."""
        return self.bodies.get(a.id, a.id)

    def remember(self, a: Attempt, cand: Candidate | None = None) -> None:
        """Add an attempt's kernel to the index (not those that never parsed)."""
        if a.reason in ("bad_candidate", "launch_conflict"):
            return
        try:
            cand = cand or self.candidate(a)
        except (CandidateError, OSError):
            return
        self.seen.setdefault(spaces.kernel_key(cand, self.task), a.id)
        self.bodies[a.id] = spaces.body_key(cand)

    def tried(self, cand: Candidate, attempts: list[Attempt]) -> set[tuple]:
        """The settings of ``cand`` whose kernel an earlier attempt already has (only the settings
        recorded for its body are looked at: a space too large to list is never listed)."""
        body = spaces.body_key(cand)
        out = set()
        for a in attempts:
            if self.bodies.get(a.id) != body:
                continue
            d = {**cand.defines, **a.defines}
            if spaces.kernel_key(cand.with_defines(d), self.task) in self.seen:
                out.add(tuple(sorted(d.items())))
        return out

    def first_with(self, cand: Candidate) -> str:
        """The attempt that first had ``cand``'s kernel, or, when every setting of it was tried,
        the first that had one of its settings."""
        key = spaces.kernel_key(cand, self.task)
        if key not in self.seen:
            key = next(k for k in (spaces.kernel_key(cand.with_defines(d), self.task) for d in cand.configurations())
                       if k in self.seen)
        return self.seen[key]
