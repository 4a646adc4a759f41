"""The spaces of the tunable kernels a run has met (:class:`RunSpaces`): each kernel body's
settings and what the run measured of them, which settings a proposal gates first, how the
tuner's settings budget of an iteration is split between its templates, and where the search
stands (summary.json's ``search``, the progress line)."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING

from kernel_forge.common.errors import CandidateError
from kernel_forge.model.candidate import Candidate, parse_candidate
from kernel_forge.records.attempt import NOT_GATED, Attempt
from kernel_forge.search import spaces
from kernel_forge.search.setting_space import Space

if TYPE_CHECKING:
    from kernel_forge.config.loop_settings import LoopConfig
    from kernel_forge.proposers.base import Proposal
    from kernel_forge.search.kernel_index import KernelIndex
    from kernel_forge.search.strategies import Strategy


class RunSpaces:
    """Derived from the attempts (never saved); ``allot`` is this iteration's split of the budget."""

    def __init__(self, config: LoopConfig, strategy: Strategy, kernels: KernelIndex):
        self.config, self.strategy, self.kernels = config, strategy, kernels
        self.spaces: dict[str, Space] = {}   # body key -> the space of a tunable kernel
        self.allot: dict[str, int] = {}      # label -> settings it may gate this iteration

    def space(self, cand: Candidate, label: str, attempts: list[Attempt]) -> Space:
        """The space of ``cand``'s kernel (its tunables), with every recorded setting of it."""
        body = spaces.body_key(cand)
        sp = self.spaces.get(body)
        if sp is None or (cand.tunables and not sp.names):
            # a copy with its tunables pinned (a bound pattern gated at its default) shares the body
            # of the template; the space is the template's, whichever of the two came first
            sp = self.spaces[body] = Space(cand, label)
            sp.seed = self.config.seed
        for a in attempts:
            if self.kernels.bodies.get(a.id) != body or a.dispatch:     # a dispatch rule is not one setting
                continue
            status = "ruled_out" if a.reason in NOT_GATED else a.status
            sp.add(a.defines, a.id, a.score_us if a.status == "passed" else None, status)
        return sp

    def allocate(self, proposals: list[Proposal], attempts: list[Attempt], *, tuner: bool) -> None:
        """The settings each of the tuner's templates may gate this iteration (the strategy splits
        ``tune_budget`` per template by promise); a model's tuned proposal gets ``tune_budget``."""
        self.allot = {}
        if not tuner:
            return
        found, labels = [], []
        for p in proposals:
            try:
                cand = parse_candidate(p.source, name=p.label or "template")
            except CandidateError:
                continue
            found.append(self.space(cand, p.label, attempts))
            labels.append(p.label)
        for label, n in zip(labels, self.strategy.allocate(found, self.config.tune_budget)):
            self.allot[label] = n

    def budget(self, label: str) -> int:
        """The settings a proposal of ``label`` may gate this iteration."""
        return self.allot.get(label, self.config.tune_budget)

    def rng(self, iteration: int, label: str, n: int) -> random.Random:
        return random.Random(f"{self.config.seed}:{iteration}:{label}:{n}")

    def first_settings(self, p: Proposal, cand: Candidate, warm: list[dict], exclude: set[tuple],
                       attempts: list[Attempt], iteration: int) -> list[tuple[dict, str]]:
        """The first round of settings of a proposal (after the archive's ``warm`` ones), each
        with why the strategy picked it."""
        c = self.config
        budget = self.budget(p.label)
        if not cand.tunables or cand.dispatch is not None:    # a dispatch rule is gated whole, as written
            return [(d, "") for d in spaces.expand(cand, budget, exclude=exclude)]
        space = self.space(cand, p.label, attempts)
        if self.strategy.name == "greedy" and not space.trials:      # today's first sample
            picked = spaces.expand(cand, max(0, budget - len(warm)), seed=c.seed + iteration,
                                   exclude=exclude | {tuple(sorted(d.items())) for d in warm})
            return [(d, "") for d in picked]
        k = max(0, min(budget, self.strategy.round_size(budget, c.refine)) - len(warm))
        skip = exclude | {tuple(sorted(d.items())) for d in warm}
        picked = self.strategy.pick(space, k + len(warm), self.rng(iteration, p.label, 0))
        return [(d, why) for d, why in picked if tuple(sorted(d.items())) not in skip][:k]

    def tuner_templates(self, attempts: list[Attempt]) -> dict[str, Candidate]:
        """label -> the template (with its tunables) of every template the tuner proposed."""
        out: dict[str, Candidate] = {}
        for a in attempts:
            if a.proposer == "tune" and a.label not in out and a.id in self.kernels.bodies and not a.dispatch:
                try:
                    out[a.label] = self.kernels.candidate(a)
                except (CandidateError, OSError):
                    continue
        # a pinned copy (a bound pattern's gate) once its template was proposed: one space, one name
        tunable = {spaces.body_key(c) for c in out.values() if c.tunables}
        return {label: c for label, c in out.items() if c.tunables or spaces.body_key(c) not in tunable}

    def spent(self, attempts: list[Attempt]) -> list[str]:
        """The tuner's templates whose every setting was gated or ruled out."""
        return [label for label, cand in self.tuner_templates(attempts).items()
                if self.space(cand, label, attempts).exhausted()]

    def summary(self, attempts: list[Attempt]) -> dict:
        """The strategy and every tunable kernel's space as ``summary.json`` records them."""
        found = [self.space(sp.cand, sp.label, attempts).counts() for sp in list(self.spaces.values()) if sp.names]
        return {"strategy": self.strategy.name, "spaces": found}

    def line(self, attempts: list[Attempt]) -> str:
        """Where the tuner's search stands: per template, settings gated of all."""
        parts = []
        for label, cand in self.tuner_templates(attempts).items():
            c = self.space(cand, label, attempts).counts()
            left = c["settings"] - c["gated"] - c["ruled_out"] - c["pending"]
            parts.append(f"{label}: {c['gated']} of {c['settings']}{'' if c['exact'] else ' (estimated)'} settings "
                         f"gated" + (f", {c['failed']} of them failed" if c["failed"] else "")
                         + (f", {c['ruled_out']} ruled out" if c["ruled_out"] else "")
                         + (f", {left} left" if left > 0 else ""))
        return "; ".join(parts)
