"""kernel_forge.proposers.ensemble: several model proposers asked in turn or all at once."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.ensemble import EnsembleProposer

from tests.support.fakes import ScriptedProposer


def test_round_robin_asks_one_member_per_iteration_in_turn():
    a = ScriptedProposer([["a1"], ["a2"]], name="a")
    b = ScriptedProposer([["b1"]], name="b")
    ens = EnsembleProposer([a, b])
    got = [ens.propose(ProposalRequest("s", "p", iteration=i)).proposals[0].source for i in (1, 2, 3)]
    assert got == ["a1", "b1", "a2"] and ens.name == "a+b"
    assert [r.iteration for r in a.requests] == [1, 3] and [r.iteration for r in b.requests] == [2]


def test_an_unknown_mode_is_an_input_error_naming_the_option():
    with pytest.raises(InputError, match="--ensemble must be round-robin or parallel, not 'all'"):
        EnsembleProposer([ScriptedProposer([])], "all")
