"""Several model proposers as one (``--model A --model B``): one per iteration in turn
(``round-robin``), or all of them every iteration (``parallel``), their results merged."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kernel_forge.common.errors import InputError
from kernel_forge.proposers.base import ProposalRequest, ProposalResult

MODES = ("round-robin", "parallel")


class EnsembleProposer:
    """Several model proposers: one per iteration in turn, or all of them each iteration."""

    def __init__(self, members, mode: str = "round-robin"):
        if mode not in MODES:
            raise InputError(f"--ensemble must be round-robin or parallel, not {mode!r}")
        self.members, self.mode = members, mode
        self.name = "+".join(m.name for m in members)
        self.needs_prompt = True

    def propose(self, request: ProposalRequest) -> ProposalResult:
        if self.mode == "round-robin" or len(self.members) == 1:
            member = self.members[(request.iteration - 1) % len(self.members)]
            return member.propose(request)
        with ThreadPoolExecutor(max_workers=len(self.members)) as pool:
            results = list(pool.map(lambda m: m.propose(request), self.members))
        merged = ProposalResult(unreachable=all(r.unreachable for r in results))
        for r in results:
            for p in r.proposals:       # Proposal.calls index the merged list
                p.calls = [i + len(merged.calls) for i in p.calls]
            merged.proposals += r.proposals
            merged.calls += r.calls
            merged.errors += r.errors
        return merged
