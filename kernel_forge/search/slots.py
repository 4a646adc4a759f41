"""One slot of an iteration (:class:`Slot`): what one of its ``candidates`` proposals is asked to
do (:mod:`kernel_forge.search.slot_plan` plans them), and what follows from a slot alone: the
kernels it starts from, the chain of fixes behind it, which slot a proposal answers."""
from __future__ import annotations

from dataclasses import dataclass

from kernel_forge.proposers.base import Proposal
from kernel_forge.records.attempt import Attempt


@dataclass
class Slot:
    """One of the ``candidates`` proposals an iteration asks for."""

    direction: str = ""
    fix: Attempt | None = None
    parent: Attempt | None = None     # where the strategy starts it (None: the best)
    second: Attempt | None = None     # a crossover's other parent
    technique: str = ""


def bound_of(attempts: list[Attempt]) -> Attempt | None:
    """The passing attempt of the task's bound pattern (a model run gates it at the start)."""
    return next((a for a in attempts if a.proposer == "bound" and a.status == "passed"), None)


def fix_chain(a: Attempt, attempts: list[Attempt]) -> list[Attempt]:
    """``a``, the attempt it was asked to fix, the one that one fixed, ... (oldest last)."""
    chain, by_id = [a], {x.id: x for x in attempts}
    while chain[-1].fix_of in by_id and len(chain) <= len(by_id):
        chain.append(by_id[chain[-1].fix_of])
    return chain


def parents_of(slots: list[Slot]) -> list[Attempt]:
    """The passed kernels the slots start from or combine (a fix's failed attempt is not one)."""
    out: list[Attempt] = []
    for s in slots:
        for x in (s.parent, s.second):
            if x is not None and x.status == "passed" and s.fix is not x and x not in out:
                out.append(x)
    return out


def slot_of(p: Proposal, i: int, slots: list[Slot]) -> Slot:
    """The slot a proposal answers: by its direction where the proposer echoes it, else by position."""
    for s in slots:
        if p.direction and s.direction == p.direction:
            return s
    return slots[i % len(slots)] if slots else Slot(direction=p.direction)
