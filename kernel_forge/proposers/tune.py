"""The built-in tuner: searches the tunable parameters kernels declare.

With no model configured it proposes the task's templates (manifest ``templates``), one per
iteration, then refines around the best configuration found.  For any proposal that declares
tunables — a template or a model's kernel — :func:`configurations_to_try` picks the settings to
gate: all of them when there are at most ``budget``, otherwise a seeded sample that always
holds the declared defaults and each tunable's extremes.
"""
from __future__ import annotations

import random
from pathlib import Path

from ..candidate import Candidate, parse_candidate
from .base import Exhausted, Proposal, ProposalRequest, ProposalResult


def configurations_to_try(candidate: Candidate, budget: int, *, seed: int = 0,
                          exclude: set[tuple] = frozenset()) -> list[dict]:
    """Settings of ``candidate``'s tunables to gate, at most ``budget`` of them."""
    configs = candidate.configurations()
    key = lambda d: tuple(sorted(d.items()))  # noqa: E731
    configs = [c for c in configs if key(c) not in exclude]
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
    valid = {key(c) for c in configs}
    for d in must:
        if key(d) in valid and d not in chosen:
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


class TuneProposer:
    """Proposes the task's templates, one per iteration; the loop expands their tunables."""

    name = "tune"

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
