"""The built-in tuner: searches the tunable parameters kernels declare.

With no model configured it proposes the task's templates (manifest ``templates``): every
iteration, each template that still has settings nobody gated or ruled out (the loop names the
others in ``ProposalRequest.spent``).  Which settings of a template are gated, and how the
iteration's settings are split between templates, is the search strategy's choice
(:mod:`kernel_forge.search.strategies`, ``--search``).  It is exhausted only when every setting of every
template was gated or ruled out (constraints, an invalid launch, a duplicate kernel).
``configurations_to_try`` and ``neighbours`` live in :mod:`kernel_forge.search.spaces` and are
re-exported here.

Bound patterns (:mod:`kernel_forge.search.bound`: the task's kind's patterns written for its own
signature) are proposed after a gate: first each one's default setting alone (label
``gate:NAME``), then, once that attempt passed (``ProposalRequest.passed``), the template with
its tunables.  A bound pattern whose gate attempt failed is not proposed again.
"""
from __future__ import annotations

from pathlib import Path

from kernel_forge.model.candidate import parse_candidate
from kernel_forge.search.bound import gate_label, gate_source
from kernel_forge.search.spaces import configurations_to_try, neighbours  # noqa: F401  (re-exported)
from kernel_forge.proposers.base import Exhausted, Proposal, ProposalRequest, ProposalResult


class TuneProposer:
    """Proposes the task's templates that have settings left; the loop picks their settings."""

    name = "tune"
    needs_prompt = False        #: proposes the task's templates whatever the prompt says

    def __init__(self, templates: list[Path], skip: int = 0, bound: list[Path] = ()):
        self.templates = [Path(t) for t in templates]
        self.bound = [Path(t) for t in bound]
        self.skip = skip         # kept for callers of earlier releases; the loop's records decide now

    def _bound_proposals(self, spent: set, passed: set) -> list[Proposal]:
        out = []
        for path in self.bound:
            if path.name in spent:
                continue
            text = path.read_text(encoding="utf-8")
            gate = gate_label(path)
            if gate in passed:
                cand = parse_candidate(text, name=path.name)
                out.append(Proposal(source=text, rationale=f"tuning bound pattern {path.name} (its default setting "
                                    f"passed the gate) over {', '.join(sorted(cand.tunables)) or 'no tunables'}",
                                    proposer="tune", label=path.name))
            elif gate not in spent:          # not gated yet; a gated one that failed is dropped
                out.append(Proposal(source=gate_source(text), rationale=f"gating bound pattern {path.name} at its "
                                    "default setting before searching its settings", proposer="tune", label=gate))
        return out

    def propose(self, request: ProposalRequest) -> ProposalResult:
        if not self.templates and not self.bound:
            raise Exhausted("the task declares no templates for the tuner")
        spent = set(request.spent)
        left = [p for p in self.templates if p.name not in spent]
        bound = self._bound_proposals(spent, set(getattr(request, "passed", ()) or ()))
        if not left and not bound:
            raise Exhausted(f"every setting of every template the task declares ({len(self.templates)}) "
                            + (f"and of the bound patterns that passed their gate ({len(self.bound)}) " if self.bound else "")
                            + "was gated or ruled out")
        out = []                 # the task's own templates first, then the bound patterns
        for path in left:
            text = path.read_text(encoding="utf-8")
            cand = parse_candidate(text, name=path.name)
            out.append(Proposal(source=text, rationale=f"tuning template {path.name} over "
                                f"{', '.join(sorted(cand.tunables)) or 'no tunables'}",
                                proposer="tune", label=path.name))
        return ProposalResult(proposals=out + bound)
