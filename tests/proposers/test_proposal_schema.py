"""kernel_forge.proposers.proposal_schema: the submit_kernel arguments checked with readable messages, and
turned into a Proposal."""
from __future__ import annotations

import pytest

from kernel_forge.proposers import proposal_schema as schema
from kernel_forge.proposers.base import Proposal
from tests.support.generic_proposers import GOOD, KERNEL

BAD_GRID = {**GOOD, "launch": {"grid": [], "block": [256]}}

def test_schema_messages_and_conversion():
    assert schema.check_proposal(GOOD) is None
    assert schema.check_proposal({"source": "x"}) == "$: missing required field 'rationale'"
    assert schema.check_proposal("x").startswith("$: expected an object")
    msg = schema.check_proposal({**GOOD, "launch": {"grid": [1, 2, 3, 4], "block": [1.5], "warps": 4}})
    assert "$.launch: unexpected field(s) 'warps'" in msg
    assert "$.launch.grid: allows at most 3 item(s), got 4" in msg
    assert "$.launch.block[0]: expected a non-negative integer or a non-empty expression string, got 1.5" in msg
    assert schema.check_proposal({**GOOD, "tunables": {"BLOCK": []}}) == \
        "$.tunables.BLOCK: needs at least 1 item(s), got 0"
    assert "not a valid macro name" in schema.check_proposal({**GOOD, "tunables": {"2X": [1]}})
    assert "$.tunables.B[0]: expected number" in schema.check_proposal({**GOOD, "tunables": {"B": ["8"]}})
    assert schema.check_proposal({**GOOD, "source": "   "}) == "$.source: must not be blank"

    p = schema.to_proposal({"source": KERNEL, "rationale": " r ", "launch": {"grid": [4], "block": [64]}},
                           proposer="x:y")
    assert p == Proposal(source=KERNEL, rationale="r", launch={"grid": [4], "block": [64], "shared_mem": 0},
                         tunables=None, proposer="x:y")
    with pytest.raises(schema.ProposalSchemaError, match=r"\$\.launch\.grid"):
        schema.to_proposal(BAD_GRID)


def test_past_five_problems_the_message_counts_the_rest_shallowest_paths_first():
    msg = schema.check_proposal({"source": "", "rationale": 1, "launch": {"grid": [], "block": [], "x": 1},
                                 "tunables": {"1a": [], "2b": []}})
    # seven schema errors (sorted by depth, then path) and two bad macro names: five shown, four counted
    assert msg == ("$.launch: unexpected field(s) 'x'; $.rationale: expected string, got int 1; "
                   "$.source: must not be empty; $.launch.block: needs at least 1 item(s), got 0; "
                   "$.launch.grid: needs at least 1 item(s), got 0 (and 4 more problem(s))")


def test_a_proposal_keeps_a_cooperative_launch_its_technique_direction_and_a_numeric_predicted_speedup():
    p = schema.to_proposal({"source": KERNEL, "rationale": "r", "technique": " float4 ", "direction": " memory ",
                            "predicted_speedup": 1.5, "tunables": {"BLOCK": [256, 128]},
                            "launch": {"grid": [8], "block": [256], "shared_mem": "BLOCK * 4", "cooperative": True}},
                           proposer="m", parent="a0003", label="L", rationale_prefix="[from text]")
    assert p.launch == {"grid": [8], "block": [256], "shared_mem": "BLOCK * 4", "cooperative": True}
    assert (p.technique, p.model_direction, p.predicted_speedup) == ("float4", "memory", 1.5)
    assert (p.rationale, p.parent, p.label, p.tunables) == ("[from text] r", "a0003", "L", {"BLOCK": [256, 128]})
    plain = schema.to_proposal({"source": KERNEL, "rationale": "r", "launch": {"grid": [8], "block": [256],
                                                                               "cooperative": False}})
    assert "cooperative" not in plain.launch and plain.predicted_speedup is None and plain.technique == ""
    # the schema takes a boolean for a number nowhere: predicted_speedup true is refused
    assert "$.predicted_speedup: expected number, got bool True" in schema.check_proposal({**GOOD, "predicted_speedup": True})


def test_the_schema_handed_out_is_a_copy_and_a_valid_proposal_comes_back_unchanged():
    mine = schema.proposal_schema()
    mine["properties"]["launch"]["required"].append("warps")
    assert schema.proposal_schema()["properties"]["launch"]["required"] == ["grid", "block"]
    assert schema.validate_proposal(GOOD) is GOOD
    with pytest.raises(schema.ProposalSchemaError, match="missing required field 'source'"):
        schema.validate_proposal({"rationale": "r"})
