"""The proposer protocol's request (proposers/base.py): one ProposalSlot per proposal, each with its
own prompt, direction and parents; providers read it only through prompt_for, parent_for and
full_prompt."""
from __future__ import annotations

import dataclasses

from kernel_forge.proposers.base import ProposalRequest, ProposalSlot


def test_each_proposal_reads_its_own_slot_and_a_slot_without_a_prompt_reads_the_requests():
    req = ProposalRequest(system="s", prompt="shared", n=3, static_prefix="# Task",
                          slots=[ProposalSlot(prompt="own 0", direction="vectorise", parent="a0003"),
                                 ProposalSlot(direction="unroll", parent="a0001", technique="crossover",
                                              second_parent="a0002")])
    assert [req.prompt_for(i) for i in range(3)] == ["own 0", "shared", "shared"]
    assert req.full_prompt(0) == "# Task\n\nown 0" and req.full_prompt(2) == "# Task\n\nshared"
    assert [(s.direction, s.parent, s.technique, s.second_parent) for s in req.slots] == [
        ("vectorise", "a0003", "", None), ("unroll", "a0001", "crossover", "a0002")]


def test_a_slot_with_no_source_builds_on_nothing_and_one_slot_gives_its_source_to_every_proposal():
    two = ProposalRequest(system="s", prompt="p", n=3, slots=[ProposalSlot(parent_source="kernel A"),
                                                              ProposalSlot(parent_source="")])
    assert [two.parent_for(i) for i in range(3)] == ["kernel A", None, None]
    one = ProposalRequest(system="s", prompt="p", n=3, slots=[ProposalSlot(parent_source="kernel A")])
    assert [one.parent_for(i) for i in range(3)] == ["kernel A"] * 3
    assert ProposalRequest(system="s", prompt="p", n=2).parent_for(0) is None


def test_the_request_holds_no_parallel_per_proposal_lists():
    names = {f.name for f in dataclasses.fields(ProposalRequest)}
    assert not names & {"prompts", "directions", "parent_sources", "parents", "techniques", "seconds"}
    assert {f.name for f in dataclasses.fields(ProposalSlot)} == {
        "prompt", "direction", "parent_source", "parent", "technique", "second_parent"}
