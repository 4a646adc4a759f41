"""A slot alone (search/slots.py): which slot a proposal answers, the chain of fixes behind an
attempt, the kernels slots start from, the bound pattern's passing attempt."""
from __future__ import annotations

from kernel_forge.proposers.base import Proposal
from kernel_forge.records.attempt import Attempt
from kernel_forge.search.slots import Slot, bound_of, fix_chain, parents_of, slot_of


def att(i: int, status: str = "passed", **kw) -> Attempt:
    return Attempt(id=f"a{i:04d}", iteration=1, proposer=kw.pop("proposer", "scripted"), status=status, **kw)


def test_a_proposal_that_echoes_a_direction_answers_that_slot_else_the_one_at_its_position():
    slots = [Slot(direction="vectorise"), Slot(direction="unroll")]
    assert slot_of(Proposal(source="", direction="unroll"), 0, slots) is slots[1]
    assert slot_of(Proposal(source="", direction="something else"), 3, slots) is slots[1]
    assert slot_of(Proposal(source="", direction="x"), 0, []).direction == "x"


def test_the_fix_chain_runs_from_the_attempt_to_the_first_it_repairs():
    a, b, c = att(1, "failed"), att(2, "failed", fix_of="a0001"), att(3, "failed", fix_of="a0002")
    assert [x.id for x in fix_chain(c, [a, b, c])] == ["a0003", "a0002", "a0001"]
    loop = att(4, "failed", fix_of="a0005"), att(5, "failed", fix_of="a0004")      # a damaged history
    assert len(fix_chain(loop[0], list(loop))) == 3


def test_slots_start_from_passed_kernels_only_and_each_once():
    best, other, broken = att(1), att(2), att(3, "failed")
    slots = [Slot(parent=best), Slot(parent=other, second=best), Slot(parent=broken, fix=broken)]
    assert parents_of(slots) == [best, other]


def test_the_bound_pattern_counts_once_it_passed():
    assert bound_of([att(1, proposer="bound", status="failed")]) is None
    bound = att(2, proposer="bound")
    assert bound_of([att(1), bound]) is bound
