"""Model-backed proposers through the real ``anthropic`` and ``openai`` SDKs against a scripted
loopback server (tests/support/loopback.py).  No other address is contacted; waits are injected.
What one provider alone does is in test_anthropic_provider.py and test_openai_provider.py."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.proposers.base import ModelCall, ProposalRequest, ProposalSlot
from kernel_forge.proposers import retry, proposal_schema as schema
from kernel_forge.proposers.answer import apply_edits, read_answer
from kernel_forge.proposers.models import make_model_proposer, parse_model_spec
from kernel_forge.proposers.options import ProviderOptions
from kernel_forge.common.scrub import REDACTED

from tests.support.generic_proposers import (ANTHROPIC_KEY, GOOD, KERNEL, OPENAI_KEY, REQUEST, TEST_PRICES, Sleeps,
                                            make)
from tests.support.loopback import closed_port_url, error, raw_arguments, text, tool

BAD_GRID = {**GOOD, "launch": {"grid": [], "block": [256]}}


@pytest.fixture(autouse=True)
def _clean_env(clean_env):
    """Every test here runs with no ambient credentials, base URLs or proxies."""


def no_jitter(max_attempts: int = 5, sleeps: Sleeps | None = None) -> retry.RetryPolicy:
    return retry.RetryPolicy(max_attempts=max_attempts, base_delay=1.0, max_delay=30.0, jitter=0.25,
                             random=lambda: 0.0, sleep=sleeps if sleeps is not None else Sleeps())


def calls_json(calls: list[ModelCall]) -> str:
    return json.dumps([dataclasses.asdict(c) for c in calls])


PROVIDERS = ["anthropic", "openai"]

# this SDK release flags claude-sonnet-4-5 as deprecated; the warning is not what is tested here
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


# ------------------------------------------------------------------------- happy paths

def test_anthropic_happy_path(loopback):
    loopback.script("anthropic", tool(GOOD, input_tokens=1000, output_tokens=500, note="Here it is."))
    p = make("anthropic", loopback, temperature=0.2)
    result = p.propose(REQUEST)

    assert result.errors == []
    assert len(result.proposals) == 1 and len(result.calls) == 1
    prop = result.proposals[0]
    assert prop.source == KERNEL
    assert prop.rationale == GOOD["rationale"]
    assert prop.launch == {"grid": ["cdiv(n, BLOCK)"], "block": ["BLOCK"], "shared_mem": 0}
    assert prop.tunables == {"BLOCK": [128, 256, 512]}
    assert prop.proposer == "anthropic:claude-test-1"

    call = result.calls[0]
    assert (call.provider, call.model) == ("anthropic", "claude-test-1")
    assert (call.input_tokens, call.output_tokens) == (1000, 500)
    assert call.cost_usd == pytest.approx(1000 * 3.0 / 1e6 + 500 * 15.0 / 1e6)   # 0.0105
    assert p.priced is True
    assert call.attempts == 1 and call.error is None
    assert call.response["content"][1]["input"] == GOOD
    assert call.response["usage"]["input_tokens"] == 1000

    (req,) = loopback.requests("anthropic")
    assert req.method == "POST"
    # what the ModelCall says was sent is what arrived
    assert call.request == req.body
    body = req.body
    assert body["model"] == "claude-test-1"
    assert body["max_tokens"] == 8192
    assert body["temperature"] == 0.2
    # the system prompt is its own block; a prompt this short is under the cache minimum, so no breakpoint
    # is marked and the evidence says why; the answer is streamed
    assert body["system"] == [{"type": "text", "text": "You write CUDA kernels."}]
    assert call.plan["cache"]["on"] is False and "under anthropic's minimum" not in call.plan["cache"]["reason"]
    assert "minimum cacheable prompt of 4096" in call.plan["cache"]["reason"]
    assert body["stream"] is True
    assert body["messages"] == [{"role": "user", "content": "Make saxpy faster."}]
    assert [t["name"] for t in body["tools"]] == ["submit_kernel"]
    assert body["tools"][0]["input_schema"] == schema.proposal_schema()
    assert body["tool_choice"]["type"] == "tool" and body["tool_choice"]["name"] == "submit_kernel"
    # the key went over the wire, in a header
    assert any(ANTHROPIC_KEY in v for v in req.headers.values())
    assert ANTHROPIC_KEY not in calls_json(result.calls)


def test_openai_happy_path(loopback):
    loopback.script("openai", tool(GOOD, input_tokens=2000, output_tokens=300))
    p = make("openai", loopback)
    result = p.propose(REQUEST)

    assert result.errors == []
    (prop,) = result.proposals
    assert prop.source == KERNEL and prop.rationale == GOOD["rationale"]
    assert prop.launch["grid"] == ["cdiv(n, BLOCK)"] and prop.tunables == {"BLOCK": [128, 256, 512]}
    assert prop.proposer == "openai:qwen-test"

    (call,) = result.calls
    assert (call.input_tokens, call.output_tokens) == (2000, 300)
    assert call.cost_usd == pytest.approx(2000 * 1.25 / 1e6 + 300 * 10.0 / 1e6)   # 0.0055
    assert call.response["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "submit_kernel"

    (req,) = loopback.requests("openai")
    assert call.request == req.body
    body = req.body
    assert body["messages"][0] == {"role": "system", "content": "You write CUDA kernels."}
    assert body["messages"][1] == {"role": "user", "content": "Make saxpy faster."}
    fn = body["tools"][0]
    assert fn["type"] == "function" and fn["function"]["name"] == "submit_kernel"
    assert fn["function"]["strict"] is False
    assert fn["function"]["parameters"] == schema.proposal_schema()
    assert body["tool_choice"] == {"type": "function", "function": {"name": "submit_kernel"}}
    assert "temperature" not in body
    assert req.headers["authorization"] == f"Bearer {OPENAI_KEY}"


# ------------------------------------------------------------------------- retries

@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_retry_after_is_honoured(loopback, provider):
    sleeps = Sleeps()
    loopback.script(provider, error(429, "slow down", retry_after="2"), tool(GOOD))
    result = make(provider, loopback, sleep=sleeps).propose(REQUEST)

    assert result.errors == [] and len(result.proposals) == 1
    assert sleeps == [2.0]
    (call,) = result.calls
    assert call.attempts == 2 and call.error is None
    assert len(loopback.requests(provider)) == 2
    # the SDK did not retry on its own: both attempts carry retry count 0
    assert [r.headers.get("x-stainless-retry-count") for r in loopback.requests(provider)] == ["0", "0"]


def test_retry_after_ms_and_overloaded(loopback):
    sleeps = Sleeps()
    loopback.script("anthropic", error(529, "overloaded", retry_after_ms="1500", retry_after="9"), tool(GOOD))
    result = make("anthropic", loopback, sleep=sleeps).propose(REQUEST)
    assert len(result.proposals) == 1 and sleeps == [1.5] and result.calls[0].attempts == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_500_then_success(loopback, provider):
    sleeps = Sleeps()
    loopback.script(provider, error(500, "boom"), tool(GOOD, input_tokens=1000))
    result = make(provider, loopback, retry=no_jitter(sleeps=sleeps)).propose(REQUEST)
    assert len(result.proposals) == 1 and result.errors == []
    assert sleeps == [1.0]                       # base_delay * 2**0, no jitter
    assert result.calls[0].attempts == 2
    assert result.calls[0].input_tokens == 1000  # tokens of the answer that succeeded


@pytest.mark.parametrize("provider", PROVIDERS)
def test_timeout_then_success(loopback, provider):
    sleeps = Sleeps()
    # the silence outlasts the timeout by far, and the quick answer has a whole second: a loaded
    # machine (pytest -n, other jobs) must not time out the second attempt too (0.3 s did, now and then)
    loopback.script(provider, tool(GOOD).slow(4.0), tool(GOOD))
    result = make(provider, loopback, request_timeout_s=1.0, sleep=sleeps).propose(REQUEST)
    assert len(result.proposals) == 1 and result.errors == []
    (call,) = result.calls
    assert call.attempts == 2 and len(sleeps) == 1
    assert 0.95 <= call.seconds < 4.0
    assert len(loopback.requests(provider)) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_retries_exhausted_become_an_error(loopback, provider):
    sleeps = Sleeps()
    loopback.script(provider, error(503, "unavailable"), error(503, "unavailable"), error(503, "still unavailable"))
    result = make(provider, loopback, retry=no_jitter(max_attempts=3, sleeps=sleeps)).propose(REQUEST)

    assert result.proposals == []
    assert len(result.errors) == 1
    assert "3 attempt(s)" in result.errors[0] and "HTTP 503: still unavailable" in result.errors[0]
    assert sleeps == [1.0, 2.0]                  # doubling backoff
    (call,) = result.calls
    assert call.attempts == 3 and call.response is not None
    assert "still unavailable" in json.dumps(call.response)
    assert call.error.startswith("HTTP 503") and call.cost_usd == 0.0 and call.input_tokens == 0
    assert len(loopback.requests(provider)) == 3 and loopback.unscripted == []
    assert result.unreachable is False               # the server answered: reachable, only failing


@pytest.mark.parametrize("provider", PROVIDERS)
def test_client_error_is_not_retried(loopback, provider):
    sleeps = Sleeps()
    loopback.script(provider, error(400, "bad request"), tool(GOOD))
    result = make(provider, loopback, sleep=sleeps).propose(REQUEST)
    assert result.proposals == [] and sleeps == []
    assert result.calls[0].attempts == 1 and "HTTP 400: bad request" in result.errors[0]
    assert loopback.pending(provider) == 1


def test_max_attempts_argument(loopback):
    loopback.script("openai", *[error(502, "gateway")] * 2)
    result = make("openai", loopback, max_attempts=2).propose(REQUEST)
    assert result.calls[0].attempts == 2 and "2 attempt(s)" in result.errors[0]


# ------------------------------------------------------------------------- repair


@pytest.mark.parametrize("provider", PROVIDERS)
def test_schema_failure_twice_is_recorded_not_raised(loopback, provider):
    loopback.script(provider, tool(BAD_GRID), tool(BAD_GRID))
    result = make(provider, loopback).propose(REQUEST)

    assert result.proposals == []
    assert len(result.calls) == 2 and len(loopback.requests(provider)) == 2
    (err,) = result.errors
    assert "still invalid after one repair" in err
    assert "$.launch.grid: needs at least 1 item(s), got 0" in err
    assert all(c.error and "$.launch.grid" in c.error for c in result.calls)
    assert "$.launch.grid" in json.dumps(loopback.requests(provider)[1].body["messages"][-1])
    assert loopback.unscripted == []


def test_text_answer_without_code_is_repaired_then_fails(loopback):
    loopback.script("openai", text("I would use shared memory."), text("Still no code, sorry."))
    result = make("openai", loopback).propose(REQUEST)
    assert result.proposals == [] and "no submit_kernel tool call" in result.errors[0]
    second = loopback.requests("openai")[1].body["messages"]
    assert second[-2] == {"role": "assistant", "content": "I would use shared memory."}
    assert second[-1]["role"] == "user" and "no submit_kernel tool call" in second[-1]["content"]


# ------------------------------------------------------------------------- compatible servers


def test_openai_default_endpoint_without_key_is_an_environment_problem():
    from kernel_forge.proposers.openai_provider import OpenAIProposer
    from kernel_forge.proposers.anthropic_provider import AnthropicProposer

    with pytest.raises(EnvironmentProblem, match="OPENAI_API_KEY"):
        OpenAIProposer("gpt-5")
    with pytest.raises(EnvironmentProblem, match="ANTHROPIC_API_KEY"):
        AnthropicProposer("claude-sonnet-4-5")


def test_api_key_from_environment(loopback, monkeypatch):
    from kernel_forge.proposers.openai_provider import OpenAIProposer

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    loopback.script("openai", tool(GOOD))
    result = OpenAIProposer("gpt-5", ProviderOptions(base_url=loopback.openai_base_url, request_timeout_s=0.3)).propose(REQUEST)
    assert len(result.proposals) == 1
    assert loopback.requests("openai")[0].headers["authorization"] == f"Bearer {OPENAI_KEY}"


def test_text_fallback_with_fenced_block(loopback):
    answer = ("Here is a faster version.\n\n```cuda\n" + KERNEL + "```\n\nIt coalesces loads.")
    loopback.script("openai", text(answer))
    result = make("openai", loopback).propose(REQUEST)

    assert result.errors == []
    (prop,) = result.proposals
    assert prop.source == KERNEL
    assert prop.rationale.startswith("[from text]")
    assert "Here is a faster version." in prop.rationale and "It coalesces loads." in prop.rationale
    assert "__global__" not in prop.rationale
    assert prop.launch is None and prop.tunables is None
    assert result.calls[0].error is None and len(loopback.requests("openai")) == 1


def test_an_answer_is_read_from_its_fenced_blocks():
    kernel = "__global__ void k(){}"
    assert read_answer(f"```cpp\n{kernel}\n```").args["source"] == kernel + "\n"
    assert read_answer(f"why\n```c++\n{kernel}\n```").args["rationale"] == "why"
    assert read_answer("```python\n__global__ = 1\n```").problem.startswith("the answer holds no ```cuda block")
    assert read_answer("```cuda\nint main() {}\n```").args is None                        # no kernel
    two = f"```cuda\nint x;\n```\nthen\n```cuda\n{kernel}\n```"
    got = read_answer(two).args
    assert got["source"] == kernel + "\n" and got["rationale"] == "```cuda\nint x;\n```\nthen"
    answer = read_answer(f"Vectorised.\n\n```cuda\n{KERNEL}```\n\n```json\n"
                         '{"launch": {"grid": ["cdiv(n, BLOCK)"], "block": ["BLOCK"]}, "tunables": {"BLOCK": [128]}, '
                         '"technique": "float4", "direction": "memory", "predicted_speedup": 1.4}\n```\n')
    assert answer.problem is None and answer.form == "file"
    assert answer.args == {"source": KERNEL, "rationale": "Vectorised.", "launch": {"grid": ["cdiv(n, BLOCK)"],
                           "block": ["BLOCK"]}, "tunables": {"BLOCK": [128]}, "direction": "memory",
                           "technique": "float4", "predicted_speedup": 1.4}
    assert "not valid JSON" in read_answer(f"```cuda\n{kernel}\n```\n```json\n{{oops\n```").problem
    assert "unknown key(s) 'speedup'" in read_answer(f"```cuda\n{kernel}\n```\n```json\n{{\"speedup\": 2}}\n```").problem
    assert "positive number" in read_answer(f"```cuda\n{kernel}\n```\n```json\n{{\"predicted_speedup\": -1}}\n```").problem


def test_search_replace_edits_apply_to_the_parent_or_say_which_edit_failed():
    diff = ("<<<<<<< SEARCH\n  if (i < n) y[i] = a * x[i] + y[i];\n=======\n"
            "  if (i < n) y[i] = fmaf(a, x[i], y[i]);\n>>>>>>> REPLACE\n")
    source, problem = apply_edits(KERNEL, diff)
    assert problem is None and "fmaf(a, x[i], y[i])" in source and source.count("\n") == KERNEL.count("\n")
    answer = read_answer(f"Use an FMA.\n\n```diff\n{diff}```\n", parent=KERNEL)
    assert answer.form == "diff" and answer.args["source"] == source and answer.args["rationale"] == "Use an FMA."
    # trailing spaces in SEARCH still match; a SEARCH that is not there is named
    loose, problem = apply_edits(KERNEL, diff.replace("y[i];\n=", "y[i];   \n="))
    assert problem is None and loose == source
    _, problem = apply_edits(KERNEL, diff.replace("a * x[i]", "b * x[i]"))
    assert problem.startswith("edit 1 of 1: its SEARCH text is not in the parent kernel") and "if (i < n)" in problem
    _, problem = apply_edits("x;\nx;\n", "<<<<<<< SEARCH\nx;\n=======\ny;\n>>>>>>> REPLACE\n")
    assert "occurs 2 times" in problem
    assert "no parent kernel" in read_answer(f"```diff\n{diff}```").problem


# ------------------------------------------------------------------------- n, secrets

@pytest.mark.parametrize("provider", PROVIDERS)
def test_three_proposals_make_three_calls(loopback, provider):
    variants = [{**GOOD, "rationale": f"variant {i}"} for i in range(3)]
    loopback.script(provider, *[tool(v) for v in variants])
    result = make(provider, loopback).propose(dataclasses.replace(REQUEST, n=3))
    assert result.errors == []
    assert len(result.proposals) == 3 and len(result.calls) == 3
    assert sorted(p.rationale for p in result.proposals) == ["variant 0", "variant 1", "variant 2"]
    assert len(loopback.requests(provider)) == 3
    # independent conversations: every request holds just the one user prompt
    assert all(len([m for m in r.body["messages"] if m["role"] == "user"]) == 1
               for r in loopback.requests(provider))
    assert sum(c.cost_usd for c in result.calls) == pytest.approx(3 * result.calls[0].cost_usd)


@pytest.mark.parametrize("provider,key", [("anthropic", ANTHROPIC_KEY), ("openai", OPENAI_KEY),
                                          ("openai", "local-server-token-123456")])
def test_api_key_never_in_model_calls(loopback, provider, key):
    loopback.script(provider,
                    error(429, "rate limited", retry_after="0"),
                    tool(BAD_GRID),
                    tool(GOOD),
                    error(401, f"invalid x-api-key: {key}"))
    p = make(provider, loopback, api_key=key)
    first = p.propose(REQUEST)
    second = p.propose(REQUEST)
    calls = first.calls + second.calls
    assert len(calls) == 3 and second.proposals == []
    # the server saw the key on every request ...
    assert all(any(key in v for v in r.headers.values()) for r in loopback.received)
    # ... but no ModelCall and no error string holds it, even where the server echoed it back
    dumped = calls_json(calls) + json.dumps(first.errors + second.errors)
    assert key not in dumped
    assert REDACTED in json.dumps(dataclasses.asdict(calls[-1]))
    for c in calls:
        assert key not in json.dumps(c.request) and key not in json.dumps(c.response)


# ------------------------------------------------------------------------- make_model_proposer

def test_make_model_proposer_builds_both(loopback):
    from kernel_forge.proposers.anthropic_provider import AnthropicProposer
    from kernel_forge.proposers.openai_provider import OpenAIProposer

    a = make_model_proposer("anthropic:claude-haiku-4-5", base_url=loopback.anthropic_base_url,
                            api_key=ANTHROPIC_KEY, max_tokens=4096, request_timeout_s=0.3, answer_format="tool")
    o = make_model_proposer("openai:qwen2.5-coder:32b", base_url=loopback.openai_base_url, answer_format="tool",
                            prices={"openai:qwen2.5-coder:32b": {"input": 0.1, "output": 0.2}})
    assert isinstance(a, AnthropicProposer) and a.name == "anthropic:claude-haiku-4-5" and a.max_tokens == 4096
    assert isinstance(o, OpenAIProposer) and o.model == "qwen2.5-coder:32b" and o.priced and o.api == "chat"
    assert parse_model_spec(" OpenAI:gpt-4o ") == ("openai", "gpt-4o")

    loopback.script("anthropic", tool(GOOD, input_tokens=10_000, output_tokens=2_000))
    loopback.script("openai", tool(GOOD, input_tokens=10_000, output_tokens=2_000))
    assert a.propose(REQUEST).calls[0].cost_usd == pytest.approx(10_000 * 1.0 / 1e6 + 2_000 * 5.0 / 1e6)
    assert o.propose(REQUEST).calls[0].cost_usd == pytest.approx(10_000 * 0.1 / 1e6 + 2_000 * 0.2 / 1e6)


def test_missing_sdk_is_an_environment_problem(monkeypatch):
    from kernel_forge.proposers.anthropic_provider import AnthropicProposer
    from kernel_forge.proposers.openai_provider import OpenAIProposer

    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(EnvironmentProblem) as info:
        AnthropicProposer("claude-sonnet-4-5", api_key=ANTHROPIC_KEY)
    assert "pip install" in str(info.value) and "anthropic" in str(info.value)
    with pytest.raises(EnvironmentProblem, match="pip install"):
        OpenAIProposer("gpt-5", api_key=OPENAI_KEY)


def test_importing_kernel_forge_does_not_import_the_sdks():
    code = ("import sys, kernel_forge, kernel_forge.proposers.models, kernel_forge.proposers.anthropic_provider, "
            "kernel_forge.proposers.openai_provider, kernel_forge.app.run_setup, kernel_forge.app.cli_options, "
            "kernel_forge.app.cli, kernel_forge.app.cli_run; "
            "print(sorted(m for m in ('anthropic', 'openai') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"




# ------------------------------------------------------------------------- reasoning models

def test_reasoning_settings_are_checked():
    from kernel_forge.proposers.anthropic_provider import AnthropicProposer
    from kernel_forge.proposers.openai_provider import OpenAIProposer

    with pytest.raises(InputError, match=">= 1024"):
        AnthropicProposer("claude-sonnet-4-5", ProviderOptions(thinking_budget=512), api_key=ANTHROPIC_KEY)
    with pytest.raises(InputError, match="not both"):
        AnthropicProposer("claude-sonnet-4-5", ProviderOptions(thinking_budget=2048, thinking="adaptive"),
                          api_key=ANTHROPIC_KEY)
    with pytest.raises(InputError, match="low, medium, high"):
        AnthropicProposer("claude-sonnet-4-5", ProviderOptions(reasoning_effort="minimal"), api_key=ANTHROPIC_KEY)
    with pytest.raises(InputError, match="reasoning_effort"):
        OpenAIProposer("gpt-5", ProviderOptions(reasoning_effort="huge"), api_key=OPENAI_KEY)
    with pytest.raises(InputError, match="max_tokens_field"):
        OpenAIProposer("gpt-5", ProviderOptions(max_tokens_field="max_output_tokens"), api_key=OPENAI_KEY)
    with pytest.raises(InputError, match="timeout"):
        OpenAIProposer("gpt-5", ProviderOptions(request_timeout_s=0), api_key=OPENAI_KEY)


# ------------------------------------------------------------------------- truncated answers

LIMIT = {"anthropic": "max_tokens", "openai": "max_tokens"}   # a base URL: compatible servers' field


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_truncated_answer_is_asked_again_with_twice_the_limit(loopback, provider, stream):
    loopback.script(provider, tool(GOOD).truncated(), tool(GOOD))
    result = make(provider, loopback, max_tokens=4000, stream=stream).propose(REQUEST)

    assert result.errors == [] and len(result.proposals) == 1
    first, second = (r.body for r in loopback.requests(provider))
    key = LIMIT[provider]
    assert (first[key], second[key]) == (4000, 8000)
    assert second["messages"] == first["messages"]            # the same conversation, a larger limit
    cut, ok = result.calls
    assert cut.error.startswith("truncated: the answer was cut off at the output limit (4000 tokens)")
    assert f"{key}=8000" in cut.error and ok.error is None
    assert result.proposals[0].calls == [0, 1]


def test_truncated_answer_uses_the_configured_limit_field(loopback):
    loopback.script("openai", tool(GOOD).truncated(), tool(GOOD))
    make("openai", loopback, max_tokens=3000, max_tokens_field="max_completion_tokens").propose(REQUEST)
    first, second = (r.body for r in loopback.requests("openai"))
    assert "max_tokens" not in first and (first["max_completion_tokens"], second["max_completion_tokens"]) == (3000, 6000)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_truncated_answer_at_the_cap_asks_for_a_shorter_answer(loopback, provider):
    loopback.script(provider, tool(GOOD).truncated(), tool(GOOD))
    result = make(provider, loopback, max_tokens=4000, max_tokens_cap=4000).propose(REQUEST)

    assert result.errors == [] and len(result.proposals) == 1
    first, second = (r.body for r in loopback.requests(provider))
    assert second != first and second[LIMIT[provider]] == 4000
    last = second["messages"][-1]
    note = last["content"] if isinstance(last["content"], str) else last["content"][-1]["text"]
    assert last["role"] == "user" and "cut off at the output limit (4000 tokens)" in note
    assert "shorter answer" in result.calls[0].error


@pytest.mark.parametrize("provider", PROVIDERS)
def test_truncated_twice_is_an_error_after_one_retry(loopback, provider):
    loopback.script(provider, tool(GOOD).truncated(), tool(GOOD).truncated(), tool(GOOD))
    result = make(provider, loopback).propose(REQUEST)
    assert result.proposals == [] and len(result.calls) == 2
    assert "cut off at the output limit (16384 tokens) again" in result.errors[0]
    assert loopback.pending(provider) == 1


# ------------------------------------------------------------------------- parameters a model rejects

TEMPERATURE_400 = {
    "anthropic": "temperature: sampling parameters other than the default are not supported for this model",
    "openai": "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value "
              "is supported.",
}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_400_naming_temperature_is_retried_once_without_it_and_remembered(loopback, provider):
    loopback.script(provider, error(400, TEMPERATURE_400[provider]), tool(GOOD), tool(GOOD))
    p = make(provider, loopback, temperature=0.2)
    first = p.propose(REQUEST)
    second = p.propose(REQUEST)                 # the next proposal of the run

    assert first.errors == [] and second.errors == []
    bodies = [r.body for r in loopback.requests(provider)]
    assert [b.get("temperature") for b in bodies] == [0.2, None, None]
    rejected, ok = first.calls
    assert rejected.error.startswith("HTTP 400") and "without temperature" in rejected.error
    assert first.proposals[0].calls == [0, 1] and len(second.calls) == 1
    assert p.relaxed == {"temperature"}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_400_naming_temperature_twice_fails_and_other_400s_are_not_retried(loopback, provider):
    loopback.script(provider, error(400, TEMPERATURE_400[provider]), error(400, "temperature still rejected"))
    result = make(provider, loopback, temperature=0.2).propose(REQUEST)
    assert result.proposals == [] and len(loopback.requests(provider)) == 2
    loopback.script(provider, error(400, "messages: at least one message is required"), tool(GOOD))
    result = make(provider, loopback, temperature=0.2).propose(REQUEST)
    assert result.proposals == [] and len(result.calls) == 1 and loopback.pending(provider) == 1


def test_openai_model_rejecting_max_tokens_gets_max_completion_tokens(loopback):
    loopback.script("openai", error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                         "Use 'max_completion_tokens' instead."), tool(GOOD))
    result = make("openai", loopback, max_tokens=2000).propose(REQUEST)
    assert result.errors == []
    first, second = (r.body for r in loopback.requests("openai"))
    assert first["max_tokens"] == 2000 and "max_completion_tokens" not in first
    assert second["max_completion_tokens"] == 2000 and "max_tokens" not in second


# ------------------------------------------------------------------------- timeouts, streaming

@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_timeouts_are_counted_and_retried_a_bounded_number_of_times(loopback, provider, stream):
    sleeps = Sleeps()
    loopback.script(provider, *[tool(GOOD).slow(1.0)] * 3, tool(GOOD))
    # 8 output tokens: a whole answer waited for at once is given no longer than the 0.3 s either
    result = make(provider, loopback, request_timeout_s=0.3, timeout_retries=1, sleep=sleeps, stream=stream,
                  max_tokens=8).propose(REQUEST)

    assert result.proposals == [] and result.unreachable is False
    (call,) = result.calls
    assert (call.attempts, call.timeouts) == (2, 2) and len(sleeps) == 1
    assert call.error.startswith("timeout") and "timed out 2 time(s) at 0.3 s" in call.error
    assert len(loopback.requests(provider)) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_whole_answer_of_32k_tokens_is_given_the_time_it_takes_not_the_120_s_timeout(loopback, provider):
    """Issue 34: the non-streaming path waited 120 s for answers of 32,000 tokens or more."""
    loopback.script(provider, tool(GOOD))
    p = make(provider, loopback, request_timeout_s=120, stream=False, max_tokens=32_000, context_tokens=65_536)
    sent = []
    resource = p._client.messages if provider == "anthropic" else (
        p._client.responses if p.api == "responses" else p._client.chat.completions)
    create = resource.create

    def spy(*args, **kw):
        sent.append(kw.get("timeout"))
        return create(*args, **kw)

    resource.create = spy
    assert p.propose(REQUEST).errors == []
    (timeout,) = sent
    seconds = timeout.read if hasattr(timeout, "read") else timeout
    assert seconds >= 32_000 * 3600 / 128_000 == 900            # the SDK's own reckoning: an hour per 128k
    # a streamed answer keeps the timeout between chunks
    assert p._request_timeout({"stream": True, "max_tokens": 32_000}).read == 120


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_streamed_answer_may_take_longer_than_the_timeout(loopback, provider):
    loopback.script(provider, tool(GOOD, input_tokens=1000).trickle(0.15))      # ~8 events: over a second in all
    result = make(provider, loopback, request_timeout_s=0.5).propose(REQUEST)

    assert result.errors == [] and result.proposals[0].source == KERNEL
    (call,) = result.calls
    assert (call.attempts, call.timeouts) == (1, 0) and call.seconds > 0.5
    assert call.response is not None and call.input_tokens == 1000


# ------------------------------------------------------------------------- cost

def test_anthropic_cache_tokens_are_priced_at_their_own_rates(loopback):
    reply = tool(GOOD, input_tokens=300, output_tokens=400).usage(cache_read=2000, cache_write=1000, cache_write_1h=500)
    loopback.script("anthropic", reply, reply)
    sonnet = make("anthropic", loopback).propose(REQUEST).calls[0]
    opus = make("anthropic", loopback, model="claude-opus-5-5").propose(REQUEST).calls[0]

    assert (sonnet.input_tokens, sonnet.cache_read_tokens, sonnet.cache_write_tokens) == (3800, 2000, 1500)
    # claude-sonnet-4-5: $3 input, $15 output; reads 0.1x, 5-minute writes 1.25x, 1-hour writes 2x input
    assert sonnet.cost_usd == pytest.approx((300 * 3.0 + 2000 * 0.30 + 1000 * 3.75 + 500 * 6.0 + 400 * 15.0) / 1e6)
    assert sonnet.cost_usd == pytest.approx(0.01425)
    # claude-opus-5-5: $4 / $20, and a published cache read of $0.20 (0.05x, not the default 0.1x)
    assert opus.cost_usd == pytest.approx((300 * 4.0 + 2000 * 0.20 + 1000 * 5.0 + 500 * 8.0 + 400 * 20.0) / 1e6)


def test_openai_cached_input_and_cache_writes_are_priced(loopback):
    loopback.script("openai", tool(GOOD, input_tokens=10_000, output_tokens=500).usage(cache_read=6_000, cache_write=3_000))
    call = make("openai", loopback, model="gpt-6-sol").propose(REQUEST).calls[0]
    assert (call.input_tokens, call.cache_read_tokens, call.cache_write_tokens) == (10_000, 6_000, 3_000)
    # gpt-6-sol: $2 input, $0.20 cached input, $2.50 cache writes, $10 output per million
    assert call.cost_usd == pytest.approx((1_000 * 2.0 + 6_000 * 0.20 + 3_000 * 2.50 + 500 * 10.0) / 1e6)


# ------------------------------------------------------------------------- prompts, calls, reachability

PREFIX = "# Task: saxpy\nReference: y = a * x + y\n"
DIRECTED = ProposalRequest(system="You write CUDA kernels.", prompt="unused", n=2, static_prefix=PREFIX,
                           slots=[ProposalSlot(prompt="Direction: vectorise the loads.", direction="vectorise"),
                                  ProposalSlot(prompt="Direction: unroll by four.", direction="unroll")])


def test_openai_static_prefix_starts_each_proposals_message(loopback):
    loopback.script("openai", tool({**GOOD, "rationale": "a"}), tool({**GOOD, "rationale": "b"}))
    result = make("openai", loopback, parallel=1).propose(DIRECTED)
    users = [r.body["messages"][1] for r in loopback.requests("openai")]
    assert users == [{"role": "user", "content": f"{PREFIX}\n\n{p}"} for p in [s.prompt for s in DIRECTED.slots]]
    assert [p.direction for p in result.proposals] == ["vectorise", "unroll"]


def test_proposal_calls_name_the_exchanges_that_produced_each_proposal(loopback):
    loopback.script("openai", raw_arguments('{"source": '), tool({**GOOD, "rationale": "first"}),
                    error(400, "context length exceeded"),
                    tool({**GOOD, "rationale": "third"}))
    result = make("openai", loopback, parallel=1).propose(dataclasses.replace(REQUEST, n=3))

    assert len(result.calls) == 4
    assert [(p.rationale, p.calls) for p in result.proposals] == [("first", [0, 1]), ("third", [3])]
    (err,) = result.errors
    assert "proposal 2 of 3" in err and "HTTP 400" in err


def test_ensemble_in_parallel_keeps_proposal_calls_pointing_at_the_merged_list(loopback):
    from kernel_forge.proposers.ensemble import EnsembleProposer

    loopback.script("anthropic", tool({**GOOD, "rationale": "claude"}))
    loopback.script("openai", raw_arguments("{"), tool({**GOOD, "rationale": "gpt"}))
    ens = EnsembleProposer([make("anthropic", loopback), make("openai", loopback)], "parallel")
    result = ens.propose(dataclasses.replace(REQUEST, iteration=1))
    for p in result.proposals:
        assert {result.calls[i].provider for i in p.calls} == {"anthropic" if p.rationale == "claude" else "openai"}
    assert sorted(len(p.calls) for p in result.proposals) == [1, 2] and result.unreachable is False


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_closed_port_makes_the_request_unreachable_after_few_attempts(provider):
    from kernel_forge.proposers.anthropic_provider import AnthropicProposer
    from kernel_forge.proposers.openai_provider import OpenAIProposer

    url = closed_port_url()
    sleeps = Sleeps()
    cls, key, base = ((AnthropicProposer, ANTHROPIC_KEY, url) if provider == "anthropic"
                      else (OpenAIProposer, OPENAI_KEY, url + "/v1"))
    p = cls("some-model", ProviderOptions(base_url=base, request_timeout_s=2), api_key=key, sleep=sleeps)
    result = p.propose(dataclasses.replace(REQUEST, n=2))

    assert result.unreachable is True and result.proposals == []
    assert len(result.calls) == 2 and all(c.attempts == 2 for c in result.calls)   # local: one retry only
    assert all(c.error.startswith("connection failed") for c in result.calls)
    assert len(sleeps) == 2 and len(result.errors) == 2


# ------------------------------------------------------------------------- configuration, installation

def test_make_proposer_passes_every_model_setting(loopback):
    from kernel_forge.config.proposer import ProposerConfig
    from kernel_forge.app.run_setup import make_proposer
    from kernel_forge.proposers.budget import Budget

    cfg = ProposerConfig(models=["anthropic:claude-haiku-4-5", "openai:qwen-test"], base_url=loopback.url,
                         max_tokens=6000, max_tokens_cap=9000, thinking_budget=2048, reasoning_effort="high",
                         request_timeout_s=7.0, timeout_retries=1, max_attempts=3, stream=False,
                         max_tokens_field="max_completion_tokens", prompt_cache=False, temperature=0.5,
                         cache_ttl="long", answer_format="tool", server="vllm",
                         prices={"openai:qwen-test": [0.1, 0.2]})
    a, o = make_proposer(cfg, None, budget_usd=3.0, spent_usd=1.0).members
    assert (a.thinking_budget, a.max_tokens, a.max_tokens_cap, a.prompt_cache) == (2048, 6000, 9000, False)
    assert (o.max_tokens_field, o.max_tokens, o.max_tokens_cap, o.caps.key) == \
        ("max_completion_tokens", 6000, 9000, "local:vllm")
    assert isinstance(a.budget, Budget) and a.budget is o.budget and a.budget.left == pytest.approx(2.0)
    for m in (a, o):
        assert (m.timeout, m.retry.timeout_retries, m.retry.max_attempts, m.stream) == (7.0, 1, 3, False)
        assert (m.reasoning_effort, m.temperature, m.cache_ttl, m.answer_format) == ("high", 0.5, "long", "tool")
        assert m.retry.connect_attempts == 2                    # 127.0.0.1: a local server
    # Haiku 4.5 takes no effort and no temperature with thinking on: the table says so, nothing is sent
    assert a.effort is None and a.send_temperature is False
    assert any("no temperature" in n for n in a.adjustments)


def test_budget_with_an_unpriced_model_is_refused_unless_the_config_prices_it():
    from kernel_forge.config.proposer import ProposerConfig
    from kernel_forge.app.run_setup import check_budget_prices

    cfg = ProposerConfig(models=["openai:gpt-5", "openai:llama-3.1-70b"], base_url="http://localhost:8000/v1")
    with pytest.raises(InputError) as info:
        check_budget_prices(cfg, 2.0)
    msg = str(info.value)
    assert "--budget-usd 2" in msg and "openai:llama-3.1-70b" in msg and "openai:gpt-5," not in msg
    assert '"prices"' in msg and '"openai:llama-3.1-70b": {"input"' in msg
    check_budget_prices(cfg, None)                              # no budget: an unpriced model is fine
    check_budget_prices(dataclasses.replace(cfg, prices={"openai:llama-3.1-70b": {"input": 0.2, "output": 0.2}}), 2.0)


def test_anthropic_and_openai_are_core_dependencies():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    assert {"anthropic", "openai"} <= names
    assert {re.split(r"[<>=!~ ]", d, maxsplit=1)[0] for d in project["optional-dependencies"]["llm"]} >= \
        {"anthropic", "openai"}                                  # the old extra still installs


def test_the_sdk_bounds_are_the_releases_the_request_bodies_are_checked_against():
    """pyproject.toml, the proposers' install hints and the installed SDKs agree (issue 34: the
    bounds were anthropic>=0.60 and openai>=1.100, far below anything tested)."""
    import importlib.metadata
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    from kernel_forge.proposers import anthropic_provider, openai_provider

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    deps = {Requirement(d).name: Requirement(d) for d in project["dependencies"]}
    for module, name in ((anthropic_provider, "anthropic"), (openai_provider, "openai")):
        req = deps[name]
        assert Requirement(module.SDK_REQUIREMENT) == req
        assert importlib.metadata.version(name) in req.specifier                  # the one tested here
        assert req.specifier.contains(".".join(importlib.metadata.version(name).split(".")[:2]) + ".0")
        lowest = next(s.version for s in req.specifier if s.operator == ">=")
        assert not req.specifier.contains("1.0") and tuple(map(int, lowest.split("."))) >= (2, 17)


def _sse(events) -> str:
    return "".join((f"event: {name}\n" if name else "") + f"data: {json.dumps(data) if not isinstance(data, str) else data}\n\n"
                   for name, data in events)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_the_sdk_cannot_assemble_is_a_recorded_failure(loopback, provider):
    from tests.support.loopback import raw

    if provider == "anthropic":
        start = {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                                      "model": "x", "stop_reason": None, "stop_sequence": None,
                                                      "usage": {"input_tokens": 1, "output_tokens": 1}}}
        body = _sse([("message_start", start),
                     ("content_block_delta", {"type": "content_block_delta", "index": 5,
                                              "delta": {"type": "text_delta", "text": "x"}})])
    else:
        head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "x",
                "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
        bad = {**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": "{"}}]},
                                    "finish_reason": None}]}
        body = _sse([(None, head), (None, bad), (None, "[DONE]")])
    loopback.script(provider, raw(200, body, headers={"Content-Type": "text/event-stream"}), tool(GOOD))
    result = make(provider, loopback).propose(REQUEST)
    assert result.proposals == [] and loopback.pending(provider) == 1        # not retried
    (call,) = result.calls
    assert call.error.startswith("the streamed answer could not be assembled") and call.response is None


# ------------------------------------------------------------------------- limits (issue 34)

def test_a_local_server_s_truncation_retry_leaves_its_prompt_room_in_the_context(loopback):
    """The retry doubled the output limit up to 32,768: a local server's whole default context."""
    from kernel_forge.proposers.budget import estimate_tokens

    loopback.script("chat", tool(GOOD, output_tokens=20_000), tool(GOOD, output_tokens=1_000))
    p = make_model_proposer("openai:served-model", base_url=loopback.openai_base_url, api_key="k", request_timeout_s=5,
                            server="vllm", prices={"openai:served-model": [0.1, 0.2]}, max_tokens=16_384)
    assert p.caps.context == 32_768 and p.max_tokens_cap == 65_536
    result = p.propose(REQUEST)
    first, retry_ = (r.body for r in loopback.requests("chat"))
    assert first["max_tokens"] == 16_384 and "asked again with max_tokens=" in result.calls[0].error
    assert 16_384 < retry_["max_tokens"] <= 32_768 - estimate_tokens(retry_) < 32_768
