"""The built-in tuner: searches the tunable parameters kernels declare.

With no model configured it proposes the task's templates (manifest ``templates``), one per
iteration; the loop expands their tunables and refines around the best setting found with the
search strategy in :mod:`kernel_forge.search` (``configurations_to_try`` and ``neighbours``
live there and are re-exported here).
"""
from __future__ import annotations

from pathlib import Path

from ..candidate import parse_candidate
from ..search import configurations_to_try, neighbours  # noqa: F401  (re-exported)
from .base import Exhausted, Proposal, ProposalRequest, ProposalResult


class TuneProposer:
    """Proposes the task's templates, one per iteration; the loop expands their tunables."""

    name = "tune"
    needs_prompt = False        #: proposes the task's templates whatever the prompt says

    def __init__(self, templates: list[Path], skip: int = 0):
        self.templates = [Path(t) for t in templates]
        self.position = skip

    def propose(self, request: ProposalRequest) -> ProposalResult:
        if self.position >= len(self.templates):
            raise Exhausted("the tuner has searched every template the task declares")
        batch = self.templates[self.position:self.position + max(1, request.n)]
        self.position += len(batch)
        out = []
        for path in batch:
            text = path.read_text(encoding="utf-8")
            cand = parse_candidate(text, name=path.name)
            out.append(Proposal(source=text, rationale=f"tuning template {path.name} over "
                                f"{', '.join(sorted(cand.tunables)) or 'no tunables'}",
                                proposer="tune", label=path.name))
        return ProposalResult(proposals=out)
