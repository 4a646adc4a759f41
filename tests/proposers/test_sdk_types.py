"""The strict request-type check the loopback applies to every request (tests/support/sdk_types.py)."""
from __future__ import annotations

import typing

import pytest

from tests.support.sdk_types import DELIBERATE_EXTRAS, _fields, check_request, problems, request_type

HI = [{"role": "user", "content": "hi"}]


def test_a_request_as_kforge_sends_it_passes_on_each_route():
    assert check_request("anthropic", {"model": "claude-opus-5-5", "max_tokens": 100, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}],
        "thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}, "stream": True}) == []
    assert check_request("responses", {"model": "gpt-5.6-sol", "store": False, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "a", "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"}}]}],
        "reasoning": {"effort": "xhigh"}, "include": ["reasoning.encrypted_content"], "max_output_tokens": 100}) == []
    assert check_request("chat", {"model": "m", "messages": HI, "max_tokens": 10, "reasoning_effort": "high",
                                  "stream": True, "stream_options": {"include_usage": True}}) == []


def test_unknown_fields_values_outside_a_literal_and_missing_required_fields_are_named_by_json_path():
    found = check_request("anthropic", {"model": "claude-opus-5-5", "messages": HI, "top_k_tokens": 3,
                                        "thinking": {"type": "enabled"}})
    assert "$.top_k_tokens: MessageCreateParamsNonStreaming has no field 'top_k_tokens'" in found
    assert "$.max_tokens: required by MessageCreateParamsNonStreaming, missing" in found
    assert "$.thinking.budget_tokens: required by ThinkingConfigEnabledParam, missing" in found
    assert check_request("responses", {"model": "x", "input": "hi", "prompt_cache_options": {"ttl": "24h"}}) == [
        "$.prompt_cache_options.ttl: '24h' is not one of '30m', '12h'"]
    assert check_request("chat", {"model": "m", "messages": HI, "max_tokens": "10"}) == [
        "$.max_tokens: string where an integer is expected"]


def test_a_streamed_request_is_checked_against_the_streaming_type():
    assert request_type("anthropic", True).__name__ == "MessageCreateParamsStreaming"
    assert check_request("responses", {"model": "x", "input": "hi", "stream": True}) == []
    assert check_request("responses", {"model": "x", "input": "hi", "stream": "yes"}) != []


def test_json_kinds_are_not_confused():
    assert problems(True, int, "$") == ["$: boolean where an integer is expected"]
    assert problems(3, float, "$") == [] and problems(None, typing.Optional[str], "$") == []
    assert problems({"a": 1}, typing.Dict[str, str], "$") == ["$.a: integer where a string is expected"]
    with pytest.raises(TypeError, match="does not know the type"):
        problems(1, complex, "$")


@pytest.mark.parametrize("route, name", sorted(DELIBERATE_EXTRAS))
def test_every_deliberate_extra_has_a_reason_and_is_one_the_sdk_does_not_define(route, name):
    """A listed extra the SDK has since defined would hide its type check: the list must shrink."""
    assert len(DELIBERATE_EXTRAS[(route, name)]) > 40
    for streaming in (False, True):
        fields, _ = _fields(request_type(route, streaming))
        assert name not in fields
