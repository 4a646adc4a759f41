"""kernel_forge.proposers.openai_provider: which API a model gets (Responses, or Chat Completions behind a
base URL), the effort and output limit the table allows, the tool call's arguments read, and the usage
split.  The SDK-backed tests run against the scripted loopback server (tests/loopback.py); the rest
build a proposer and call its hooks directly (no request)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.proposers.models import make_model_proposer
from kernel_forge.proposers.openai_provider import OpenAIProposer
from kernel_forge.proposers.options import ProviderOptions
from kernel_forge.proposers.transport import EmptyStream

from tests.support.loopback import raw_arguments, tool
from tests.support.generic_proposers import GOOD, KERNEL, OPENAI_KEY, REQUEST

#: a model the capability table does not list, behind a base URL (Chat Completions), priced like gpt-5
TEST_PRICES = {"openai:qwen-test": {"input": 1.25, "cached_input": 0.125, "output": 10.0}}


@pytest.fixture(autouse=True)
def _clean_env(clean_env):
    """Every test here runs with no ambient credentials, base URLs or proxies."""


def make(server, *, model: str = "qwen-test", **kw):
    """An OpenAI-compatible proposer against the loopback, answering with the submit_kernel tool."""
    kw.setdefault("request_timeout_s", 0.3)
    kw.setdefault("answer_format", "tool")
    kw.setdefault("prices", TEST_PRICES)
    kw.setdefault("sleep", lambda seconds: None)
    kw.setdefault("api_key", OPENAI_KEY)
    kw.setdefault("max_tokens", 8192)
    return make_model_proposer(f"openai:{model}", base_url=server.openai_base_url, **kw)


def built(model: str, **options) -> OpenAIProposer:
    """A proposer for ``model`` as the table has it; nothing is sent."""
    return OpenAIProposer(model, ProviderOptions(**options), api_key=OPENAI_KEY)


# ------------------------------------------------------------------------- over the SDK (moved from test_provider.py)


def test_openai_malformed_json_gets_one_repair(loopback):
    loopback.script("openai", raw_arguments('{"source": "__global__ void k() {}", "rationale": '), tool(GOOD))
    result = make(loopback).propose(REQUEST)

    assert result.errors == [] and len(result.proposals) == 1
    assert result.proposals[0].source == KERNEL
    first, second = result.calls
    assert first.error.startswith("invalid answer: the arguments are not valid JSON")
    assert second.error is None

    reqs = loopback.requests("openai")
    assert len(reqs) == 2
    msgs = reqs[1].body["messages"]
    assert msgs[:2] == reqs[0].body["messages"]
    assistant, tool_msg = msgs[2], msgs[3]
    assert assistant["role"] == "assistant"
    call_id = assistant["tool_calls"][0]["id"]
    assert assistant["tool_calls"][0]["function"]["arguments"].startswith('{"source"')
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == call_id
    assert "not valid JSON" in tool_msg["content"]
    # the quoted problem is the one recorded for the first call
    assert first.error.removeprefix("invalid answer: ") in tool_msg["content"]
    assert second.request == reqs[1].body


def test_openai_custom_base_url_needs_no_key(loopback, monkeypatch):
    from kernel_forge.proposers.openai_provider import OpenAIProposer

    loopback.script("openai", tool(GOOD, input_tokens=700, output_tokens=70))
    p = OpenAIProposer("qwen2.5-coder:32b", ProviderOptions(base_url=loopback.openai_base_url, request_timeout_s=0.3))
    result = p.propose(REQUEST)
    assert result.errors == [] and len(result.proposals) == 1
    (req,) = loopback.requests("openai")
    assert req.headers["authorization"] == "Bearer not-needed"
    assert req.body["model"] == "qwen2.5-coder:32b"
    assert req.body["max_tokens"] == 8192 and "max_completion_tokens" not in req.body
    (call,) = result.calls
    assert call.input_tokens == 700 and call.cost_usd == 0.0 and p.priced is False


@pytest.mark.parametrize("stream", [True, False])
def test_openai_reasoning_effort_and_reasoning_and_cached_tokens(loopback, stream):
    loopback.script("openai", tool(GOOD, input_tokens=10_000, output_tokens=1_000).usage(reasoning=600, cache_read=8_000))
    result = make(loopback, reasoning_effort="high", stream=stream).propose(REQUEST)

    assert result.errors == []
    (req,) = loopback.requests("openai")
    assert req.body["reasoning_effort"] == "high" and "temperature" not in req.body
    assert req.body.get("stream_options") == ({"include_usage": True} if stream else None)
    (call,) = result.calls
    assert call.request == req.body
    assert (call.input_tokens, call.cache_read_tokens, call.output_tokens, call.reasoning_tokens) == \
        (10_000, 8_000, 1_000, 600)
    # gpt-5: $1.25 input, $0.125 cached input, $10 output per million
    assert call.cost_usd == pytest.approx((2_000 * 1.25 + 8_000 * 0.125 + 1_000 * 10.0) / 1e6)


# ------------------------------------------------------------------------- the table's settings, no request

def test_openai_s_models_get_the_responses_api_and_a_server_behind_a_base_url_gets_chat_completions():
    gpt = built("gpt-5", max_tokens_field="max_completion_tokens")
    assert (gpt.api, gpt.max_tokens_field) == ("responses", "max_output_tokens")       # the field asked is Chat's
    local = built("qwen-test", base_url="http://127.0.0.1:8000/v1")
    assert (local.api, local.max_tokens_field) == ("chat", "max_tokens")
    asked = built("qwen-test", base_url="http://127.0.0.1:8000/v1", max_tokens_field="max_completion_tokens")
    assert asked.max_tokens_field == "max_completion_tokens"
    with pytest.raises(InputError, match="max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                                         "got 'max_output_tokens'"):
        built("qwen-test", base_url="http://127.0.0.1:8000/v1", max_tokens_field="max_output_tokens")


def test_the_effort_is_on_by_default_stepped_to_one_the_model_takes_and_dropped_on_a_model_that_does_not_reason():
    gpt = built("gpt-5")
    assert (gpt.effort, gpt.thinking_on, gpt.max_tokens) == ("high", True, 32000)
    stepped = built("gpt-5", reasoning_effort="xhigh")
    assert stepped.effort == "high"
    assert stepped.adjustments == ["reasoning effort 'xhigh' asked; openai:gpt-5 takes minimal, low, medium, high: "
                                   "'high' sent"]
    plain = built("gpt-4.1", reasoning_effort="high", max_tokens=50000)
    assert (plain.effort, plain.thinking_on) == (None, False)
    assert plain.adjustments == ["openai:gpt-4.1 is not a reasoning model: no reasoning effort sent"]
    assert plain.max_tokens == 32768                                 # gpt-4.1's maximum output
    # a server gets reasoning_effort only when asked, and the output limit asked is not held to the table's
    # figure for the server (8,192 for vLLM: the served model's own maximum is what binds)
    server = built("served", base_url="http://127.0.0.1:8000/v1", server="vllm", max_tokens=20000)
    assert (server.caps.key, server.caps.max_output) == ("local:vllm", 8192)
    assert (server.effort, server.max_tokens) == (None, 20000)
    assert built("qwen-test", base_url="http://127.0.0.1:8000/v1", reasoning_effort="low").effort == "low"


def _answer(arguments) -> SimpleNamespace:
    """A Responses answer holding one submit_kernel call with ``arguments``."""
    return SimpleNamespace(output=[SimpleNamespace(type="function_call", name="submit_kernel", call_id="c",
                                                   arguments=arguments)])


def test_the_tool_call_s_arguments_are_read_as_json_and_a_problem_with_them_is_named():
    p = built("gpt-5")
    assert p._tool_args(_answer('{"source": "x", "rationale": "r"}')) == (True, {"source": "x", "rationale": "r"}, None)
    assert p._tool_args(_answer({"source": "x"})) == (True, {"source": "x"}, None)          # a server sent an object
    found, args, problem = p._tool_args(_answer('{"source": '))
    assert found and args is None and problem.startswith("the arguments are not valid JSON (")
    assert p._tool_args(_answer("[" * 101)) == (True, None, "the arguments are nested more than 100 levels deep "
                                                             "at line 1")
    assert p._tool_args(SimpleNamespace(output=[SimpleNamespace(type="message", content=[])])) == (False, None, None)


def test_usage_separates_cached_input_and_cache_writes_from_the_plain_input_it_counts_in_its_total():
    p = built("gpt-5")
    details = SimpleNamespace(cached_tokens=6000, cache_write_tokens=3000,
                              cache_write_tokens_details=SimpleNamespace(ttl_12h_tokens=1000))
    usage = SimpleNamespace(input_tokens=10000, input_tokens_details=details, output_tokens=500,
                            output_tokens_details=SimpleNamespace(reasoning_tokens=200))
    got = p._usage(SimpleNamespace(usage=usage))
    assert (got.input, got.cache_read, got.cache_write, got.cache_write_long) == (1000, 6000, 2000, 1000)
    assert (got.output, got.reasoning, got.reasoning_reported) == (500, 200, True)
    # a server's Chat Completions usage, totals only: all of it plain input, no reasoning reported
    chat = built("qwen-test", base_url="http://127.0.0.1:8000/v1")
    bare = chat._usage(SimpleNamespace(usage=SimpleNamespace(prompt_tokens=700, completion_tokens=70)))
    assert (bare.input, bare.cache_read, bare.output, bare.reasoning_reported) == (700, 0, 70, False)
    # a cached count above the total is held to the total
    odd = chat._usage(SimpleNamespace(usage=SimpleNamespace(prompt_tokens=100, completion_tokens=1,
                                                            prompt_tokens_details=SimpleNamespace(cached_tokens=400))))
    assert (odd.input, odd.cache_read) == (0, 100)


def test_an_empty_stream_is_a_dropped_answer_tried_again():
    failure = built("gpt-5")._classify(EmptyStream("no chunk before the end"))
    assert (failure.retryable, failure.kind, failure.description) == (True, "dropped", "empty answer: no chunk before "
                                                                                       "the end")
