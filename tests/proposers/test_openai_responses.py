"""kernel_forge.proposers.openai_responses: the Responses API's wire format."""
from __future__ import annotations

from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.openai_responses import input_parts

PLAN = CachePlan(on=True, reason="", static="RUN", common="SHARED", rests=["OWN0", "OWN1"], prefix_tokens=5000,
                 min_tokens=1024, static_ttl="24h", key="k", static_tokens=4000, static_on=True)


def test_breakpoints_end_the_run_s_part_and_the_shared_sections_only_where_the_model_takes_them():
    parts = input_parts("breakpoints", PLAN, 1)
    assert [p["text"] for p in parts] == ["RUN", "SHARED", "OWN1"]
    assert parts[0]["prompt_cache_breakpoint"] == {"mode": "explicit", "ttl": "24h"}
    assert parts[1]["prompt_cache_breakpoint"] == {"mode": "explicit"} and "prompt_cache_breakpoint" not in parts[2]
    assert all("prompt_cache_breakpoint" not in p for p in input_parts("automatic", PLAN, 0))
