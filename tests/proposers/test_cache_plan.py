"""kernel_forge.proposers.cache_plan: how a request's prompt is split for the prompt cache."""
from __future__ import annotations

import dataclasses

from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.cache_plan import plan_cache, split_common, static_ttl
from kernel_forge.proposers.capabilities import for_model

CAPS = for_model("anthropic", "claude-opus-5-5")


def test_the_leading_sections_every_prompt_shares_are_split_off():
    common, rests = split_common(["# A\nsame\n\n# B\none", "# A\nsame\n\n# B\ntwo"])
    assert common == "# A\nsame" and rests == ["# B\none", "# B\ntwo"]
    assert split_common(["# A\nalone"]) == ("", ["# A\nalone"])


def test_caching_is_off_under_the_minimum_and_the_run_s_part_gets_its_own_breakpoint_only_above_it():
    request = ProposalRequest(system="s", prompt="p", static_prefix="x" * 10)
    small = plan_cache(request, 1, system="s", name="anthropic:m", caps=CAPS, prompt_cache=True, static_ttl="1h")
    assert small.on is False and "under" in small.reason and small.static_ttl is None
    big = dataclasses.replace(request, static_prefix="x" * int(3.5 * (CAPS.min_cache_tokens + 10)))
    plan = plan_cache(big, 1, system="s", name="anthropic:m", caps=CAPS, prompt_cache=True, static_ttl="1h")
    assert plan.on and plan.static_on and plan.static_ttl == "1h" and plan.key.startswith("kforge-")
    off = plan_cache(big, 1, system="s", name="anthropic:m", caps=CAPS, prompt_cache=False, static_ttl="1h")
    assert off.on is False and off.reason == "prompt caching turned off (--no-prompt-cache)"


def test_the_long_lifetime_is_asked_when_told_or_once_an_iteration_outlasts_the_short_one():
    short, long_ = CAPS.cache_ttls[0], CAPS.cache_ttls[-1]
    assert (short, long_) == ("5m", "1h")
    assert static_ttl(CAPS, "long", None) == "1h" and static_ttl(CAPS, "short", 9999) is None
    assert static_ttl(CAPS, "auto", 100) is None and static_ttl(CAPS, "auto", 280) == "1h"
