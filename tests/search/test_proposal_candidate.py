"""kernel_forge.search.proposal_candidate: a proposal's source with the launch and tunables of its tool
arguments as one candidate, refused where the source's // kforge: header says otherwise."""
from __future__ import annotations

import pytest

from kernel_forge.model.candidate import Launch
from kernel_forge.proposers.base import Proposal
from kernel_forge.search.proposal_candidate import LaunchConflict, candidate_from_proposal

BODY = "__global__ void k(float* y) { y[threadIdx.x] = 0.f; }\n"
HEADER = "// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n// kforge: tune BLOCK = [128, 256]\n"


def test_the_tool_s_launch_and_tunables_complete_a_source_without_a_header():
    cand = candidate_from_proposal(Proposal(source=BODY, launch={"grid": ["cdiv(n, B)", 2], "block": ["B"],
                                                                 "shared_mem": "B * 4"},
                                            tunables={"B": [64, 128], "UNROLL": [1, 2, 4]}), "a0007.cu")
    assert cand.name == "a0007.cu"
    assert cand.launch == Launch(("cdiv(n, B)", 2), ("B",), "B * 4", False)
    assert cand.tunables == {"B": (64, 128), "UNROLL": (1, 2, 4)}
    assert cand.defines == {"B": 64, "UNROLL": 1}                       # each tunable at its first value
    assert candidate_from_proposal(Proposal(source=BODY), "a.cu").launch is None   # the task's default launch


def test_a_tool_launch_that_says_what_the_header_says_is_taken_spacing_and_trailing_ones_aside():
    same = Proposal(source=HEADER + BODY, launch={"grid": ["cdiv(n,BLOCK)", 1], "block": ["BLOCK", "1", 1],
                                                  "shared_mem": 0},
                    tunables={"BLOCK": [128.0, 256.0]})                  # the same values, written as floats
    cand = candidate_from_proposal(same, "a0001.cu")
    assert cand.launch == Launch(("cdiv(n, BLOCK)",), ("BLOCK",), 0, False)    # the header's, as written
    assert cand.tunables == {"BLOCK": (128, 256)}


def test_a_tool_launch_or_tunable_the_header_contradicts_is_a_launch_conflict_that_says_both():
    with pytest.raises(LaunchConflict) as info:
        candidate_from_proposal(Proposal(source=HEADER + BODY, launch={"grid": [64], "block": ["BLOCK"]}), "a0002.cu")
    assert info.value.message == ("a0002.cu: the source's // kforge: header says grid [cdiv(n, BLOCK)], block [BLOCK], "
                                  "shared_mem 0 but the tool's launch says grid [64], block [BLOCK], shared_mem 0; "
                                  "nothing was run")
    assert info.value.hint == "give the launch once (header or tool argument), or make them agree"
    with pytest.raises(LaunchConflict) as info:
        candidate_from_proposal(Proposal(source=HEADER + BODY, tunables={"BLOCK": [128, 512]}), "a0003.cu")
    assert info.value.message == ("a0003.cu: tunable BLOCK: the source's // kforge: header says [128, 256] but the "
                                  "tool's tunables say [128, 512]; nothing was run")
