"""kernel_forge.proposers.anthropic_provider: the Messages request built from the table (thinking, effort,
output limit, cache breakpoints), thinking replayed in the repair turn, usage read, and the request
relaxed where a model rejects part of it.  The SDK-backed tests run against the scripted loopback
server (tests/loopback.py); the rest build a proposer and call its hooks directly (no request)."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.proposers.anthropic_provider import AnthropicProposer, _budget_thinking
from kernel_forge.proposers.base import ProposalRequest, ProposalSlot
from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.models import make_model_proposer
from kernel_forge.proposers.options import ProviderOptions

from tests.support.loopback import error, raw_arguments, text, tool
from tests.support.generic_proposers import ANTHROPIC_KEY, GOOD, KERNEL, REQUEST

BAD_GRID = {**GOOD, "launch": {"grid": [], "block": [256]}}
#: a model the capability table does not list (the generic request), priced like claude-sonnet-4-5
TEST_PRICES = {"anthropic:claude-test-1": {"input": 3.0, "output": 15.0}}
PREFIX = "# Task: saxpy\nReference: y = a * x + y\n"
DIRECTED = ProposalRequest(system="You write CUDA kernels.", prompt="unused", n=2, static_prefix=PREFIX,
                           slots=[ProposalSlot(prompt="Direction: vectorise the loads.", direction="vectorise"),
                                  ProposalSlot(prompt="Direction: unroll by four.", direction="unroll")])

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


@pytest.fixture(autouse=True)
def _clean_env(clean_env):
    """Every test here runs with no ambient credentials, base URLs or proxies."""


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make(server, *, model: str = "claude-test-1", **kw):
    """An Anthropic proposer against the loopback, answering with the submit_kernel tool unless told otherwise."""
    kw.setdefault("request_timeout_s", 0.3)
    kw.setdefault("answer_format", "tool")
    kw.setdefault("prices", TEST_PRICES)
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("api_key", ANTHROPIC_KEY)
    kw.setdefault("max_tokens", 8192)
    return make_model_proposer(f"anthropic:{model}", base_url=server.anthropic_base_url, **kw)


def built(model: str, **options) -> AnthropicProposer:
    """A proposer for ``model`` as the table has it; nothing is sent."""
    return AnthropicProposer(model, ProviderOptions(**options), api_key=ANTHROPIC_KEY)


# ------------------------------------------------------------------------- over the SDK (moved from test_provider.py)


def test_anthropic_schema_failure_gets_one_repair(loopback):
    missing_source = {"rationale": "forgot the source"}
    loopback.script("anthropic", tool(missing_source, note="Trying."), tool(GOOD))
    result = make(loopback).propose(REQUEST)

    assert result.errors == [] and len(result.proposals) == 1
    reqs = loopback.requests("anthropic")
    msgs = reqs[1].body["messages"]
    assert msgs[0] == {"role": "user", "content": "Make saxpy faster."}
    assistant, user = msgs[1], msgs[2]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {"type": "text", "text": "Trying."}
    use = assistant["content"][1]
    assert use["type"] == "tool_use" and use["input"] == missing_source
    (res,) = user["content"]
    assert res["type"] == "tool_result" and res["tool_use_id"] == use["id"] and res["is_error"] is True
    assert "$: missing required field 'source'" in res["content"]
    assert reqs[1].body["tool_choice"]["name"] == "submit_kernel"


def test_anthropic_non_object_tool_input_is_repaired(loopback):
    # a non-streamed body can carry a tool input that is not an object (a streamed one cannot)
    loopback.script("anthropic", raw_arguments('{"source": "trunc'), tool(GOOD))
    result = make(loopback, stream=False).propose(REQUEST)
    assert len(result.proposals) == 1 and result.errors == []
    assert result.calls[0].error.startswith("invalid answer: $: expected an object")
    msgs = loopback.requests("anthropic")[1].body["messages"]
    assert msgs[1]["content"][0]["input"] == {}          # replayed as an object, as the API requires
    assert "$: expected an object" in msgs[2]["content"][0]["content"]


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_thinking_budget_sends_enabled_thinking_with_tool_choice_auto(loopback, stream):
    reply = tool(GOOD, input_tokens=1200, output_tokens=900).thinking("Coalesce the loads first.", "c2lnLUFBQQ==")
    loopback.script("anthropic", reply.usage(reasoning=600))
    result = make(loopback, model="claude-haiku-4-5", thinking_budget=2048, max_tokens=8192,
                  stream=stream).propose(REQUEST)

    assert result.errors == [] and result.proposals[0].source == KERNEL and loopback.rejected == []
    (req,) = loopback.requests("anthropic")
    assert req.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert req.body["max_tokens"] == 8192                   # thinking counts toward max_tokens
    # Haiku 4.5 rejects a forced tool choice while it thinks: auto, so no 400
    assert req.body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert req.body.get("stream", False) is stream and "output_config" not in req.body   # it takes no effort
    (call,) = result.calls
    assert call.request == req.body
    assert (call.output_tokens, call.reasoning_tokens, call.reasoning_reported) == (900, 600, True)
    assert call.response["content"][0] == {"type": "thinking", "thinking": "Coalesce the loads first.",
                                           "signature": "c2lnLUFBQQ=="}
    assert call.cost_usd == pytest.approx(1200 * 1.0 / 1e6 + 900 * 5.0 / 1e6)   # thinking is output


def test_anthropic_adaptive_thinking_answer_in_text_is_taken_from_its_fenced_block(loopback):
    answer = "Here it is.\n\n```cuda\n" + KERNEL + "```\nOne element per thread."
    loopback.script("anthropic", text(answer).thinking("plan", "c2ln"))
    result = make(loopback, thinking="adaptive", reasoning_effort="high").propose(REQUEST)

    body = loopback.requests("anthropic")[0].body
    assert body["thinking"] == {"type": "adaptive"} and body["output_config"] == {"effort": "high"}
    assert body["tool_choice"]["type"] == "auto" and "temperature" not in body
    (prop,) = result.proposals
    assert prop.source == KERNEL and prop.rationale.startswith("[from text]")


@pytest.mark.parametrize("stream", [True, False])
def test_thinking_blocks_are_replayed_unchanged_in_the_repair_turn(loopback, stream):
    first = tool(BAD_GRID, note="Trying.").thinking("The grid must cover n.", "c2lnLVhZWi8rPT0=").redacted("RU5DUllQVEVE")
    loopback.script("anthropic", first, tool(GOOD))
    result = make(loopback, thinking_budget=1024, stream=stream).propose(REQUEST)

    assert result.errors == [] and result.proposals[0].calls == [0, 1]
    first_req, repair = (r.body for r in loopback.requests("anthropic"))
    assistant = repair["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][:3] == [
        {"type": "thinking", "thinking": "The grid must cover n.", "signature": "c2lnLVhZWi8rPT0="},
        {"type": "redacted_thinking", "data": "RU5DUllQVEVE"},
        {"type": "text", "text": "Trying."}]
    use = assistant["content"][3]
    assert use["type"] == "tool_use" and use["input"] == BAD_GRID
    assert repair["messages"][2]["content"][0]["tool_use_id"] == use["id"]
    assert repair["thinking"] == first_req["thinking"] and repair["tool_choice"]["type"] == "auto"


def test_anthropic_model_rejecting_a_forced_tool_choice_gets_auto(loopback):
    loopback.script("anthropic", error(400, "tool_choice: forced tool use is not supported with this model"),
                    tool(GOOD), tool(GOOD))
    p = make(loopback)
    p.propose(REQUEST)
    p.propose(REQUEST)
    choices = [r.body["tool_choice"]["type"] for r in loopback.requests("anthropic")]
    assert choices == ["tool", "auto", "auto"]


@pytest.mark.filterwarnings("ignore:Using Claude with")
def test_the_thinking_budget_fallback_stays_within_the_model_s_maximum(loopback):
    """The fallback from adaptive thinking to a budget set max_tokens = budget x 2 uncapped."""
    from kernel_forge.proposers import capabilities
    from kernel_forge.proposers.anthropic_provider import AnthropicProposer

    caps = dataclasses.replace(capabilities.entries()["anthropic:claude-opus-4-6"], max_output=1_500)
    loopback.script("anthropic", error(400, '"thinking.type.adaptive" is not supported for this model. Use '
                                            '"thinking.type.enabled" with budget_tokens.'), tool(GOOD))
    p = AnthropicProposer("claude-opus-4-6", ProviderOptions(base_url=loopback.anthropic_base_url, request_timeout_s=5,
                                                             max_tokens=1_000),
                          api_key=ANTHROPIC_KEY, capabilities=caps, prices=TEST_PRICES, sleep=Sleeps())
    result = p.propose(REQUEST)
    first, relaxed = (r.body for r in loopback.requests("anthropic"))
    assert first["thinking"] == {"type": "adaptive"} and relaxed["thinking"]["type"] == "enabled"
    assert relaxed["thinking"]["budget_tokens"] < relaxed["max_tokens"] <= 1_500
    assert result.errors == []


def test_anthropic_static_prefix_is_a_cached_block_before_each_proposals_prompt(loopback):
    big = PREFIX + "Reference details.\n" * 1200                 # well above the 4,096-token minimum
    directed = dataclasses.replace(DIRECTED, static_prefix=big)
    loopback.script("anthropic", tool({**GOOD, "rationale": "a"}), tool({**GOOD, "rationale": "b"}))
    result = make(loopback, parallel=1).propose(directed)

    bodies = [r.body for r in loopback.requests("anthropic")]
    cached = {"type": "ephemeral"}
    for body, prompt in zip(bodies, [s.prompt for s in DIRECTED.slots]):
        assert body["messages"] == [{"role": "user", "content": [
            {"type": "text", "text": big, "cache_control": cached}, {"type": "text", "text": prompt}]}]
        assert "cache_control" not in body["system"][0]       # the system prompt is inside the first breakpoint
    assert [(p.direction, p.rationale) for p in result.proposals] == [("vectorise", "a"), ("unroll", "b")]
    first, second = result.calls
    assert first.cache_write_tokens > 0 and first.cache_read_tokens == 0
    assert second.cache_read_tokens == first.cache_write_tokens and second.cache_write_tokens == 0

    loopback.script("anthropic", tool(GOOD))
    make(loopback, prompt_cache=False).propose(dataclasses.replace(directed, n=1))
    assert "cache_control" not in json.dumps(loopback.requests("anthropic")[-1].body)


# ------------------------------------------------------------------------- the table's settings, no request

def test_a_thinking_mode_the_model_lacks_is_swapped_for_the_one_it_has_and_the_adjustment_says_so():
    opus = built("claude-opus-4-7", thinking_budget=4096)          # adaptive thinking only
    assert opus.thinking_body == {"type": "adaptive"} and opus.thinking_on and opus.max_tokens == 32000
    assert opus.adjustments == ["anthropic:claude-opus-4-7 takes no thinking budget: adaptive thinking sent instead"]
    haiku = built("claude-haiku-4-5", thinking="adaptive")          # a thinking budget only
    # no budget given: half the output limit (32,000 with thinking on), at most 16,000
    assert haiku.thinking_body == {"type": "enabled", "budget_tokens": 16000} and haiku.max_tokens == 32000
    assert haiku.adjustments == ["anthropic:claude-haiku-4-5 has no adaptive thinking: a thinking budget sent instead"]
    small = built("claude-haiku-4-5", max_tokens=6000)
    assert small.thinking_body == {"type": "enabled", "budget_tokens": 3000} and small.max_tokens == 6000


def test_a_thinking_budget_that_fills_the_output_limit_gets_a_kernel_s_room_on_top_within_the_model_s_maximum():
    p = built("claude-haiku-4-5", thinking_budget=20000, max_tokens=8000)
    assert p.thinking_body == {"type": "enabled", "budget_tokens": 20000} and p.max_tokens == 28000
    # no limit given: the budget plus a kernel's 16,000, but never above Haiku 4.5's 64,000
    assert built("claude-haiku-4-5", thinking_budget=60000).max_tokens == 64000
    with pytest.raises(InputError) as info:
        built("claude-haiku-4-5", thinking_budget=64000)
    assert info.value.message.startswith("anthropic: a thinking budget of 64000 tokens does not fit the output "
                                         "limit of 64000 tokens (anthropic:claude-haiku-4-5 allows 64000)")
    assert info.value.hint == "raise --max-output-tokens or lower --thinking-budget"


def test_an_effort_the_model_does_not_take_is_stepped_down_or_dropped_and_the_adjustment_names_what_it_takes():
    opus = built("claude-opus-4-6", reasoning_effort="xhigh")
    assert opus.effort == "high"
    assert opus.adjustments == ["effort 'xhigh' asked; anthropic:claude-opus-4-6 takes low, medium, high, max: "
                                "'high' sent"]
    haiku = built("claude-haiku-4-5", reasoning_effort="high")
    assert haiku.effort is None and haiku.adjustments == ["effort 'high' asked; anthropic:claude-haiku-4-5 takes "
                                                          "no effort: none sent"]


def _plan(*, static="", common="", rests=("own part",), static_on=True, static_ttl=None, on=True) -> CachePlan:
    return CachePlan(on=on, reason="", static=static, common=common, rests=list(rests), prefix_tokens=0,
                     min_tokens=1024, static_ttl=static_ttl, key="k", static_on=static_on)


def test_the_run_s_part_and_the_shared_sections_each_end_at_a_breakpoint_and_the_proposal_s_own_part_at_none():
    p = built("claude-opus-4-7")
    body = p._initial_body(ProposalRequest(system="sys", prompt=""), 1,
                           _plan(static="run", common="shared", rests=("zero", "one"), static_ttl="1h"))
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "run", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"type": "text", "text": "shared", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "one"}]}]
    assert body["system"] == [{"type": "text", "text": "sys"}]        # inside the run's breakpoint
    # a run's part under the minimum gets no breakpoint; with no run's part the system prompt ends there
    short = p._initial_body(ProposalRequest(system="sys", prompt=""), 0, _plan(static="run", static_on=False))
    assert short["messages"][0]["content"][0] == {"type": "text", "text": "run"}
    bare = p._initial_body(ProposalRequest(system="sys", prompt=""), 0, _plan(common="shared"))
    assert bare["system"] == [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]
    off = p._initial_body(ProposalRequest(system="sys", prompt=""), 0, _plan(static="run", on=False))
    assert "cache_control" not in json.dumps(off)
    alone = p._initial_body(ProposalRequest(system="", prompt=""), 0, _plan(rests=("just this",)))
    assert alone["messages"] == [{"role": "user", "content": "just this"}] and "system" not in alone


def test_a_lower_output_limit_lowers_a_thinking_budget_to_half_of_it_or_cannot_be_asked():
    p = built("claude-haiku-4-5", thinking_budget=4000, max_tokens=8000)
    body = {"max_tokens": 8000, "thinking": {"type": "enabled", "budget_tokens": 4000}}
    assert p._with_limit(body, 6000) == {"max_tokens": 6000, "thinking": {"type": "enabled", "budget_tokens": 4000}}
    assert p._with_limit(body, 3000) == {"max_tokens": 3000, "thinking": {"type": "enabled", "budget_tokens": 1500}}
    assert p._with_limit(body, 2000) is None              # 1,000 is below the API's least budget of 1,024
    assert body["max_tokens"] == 8000                      # the body asked for is not changed


def test_the_fallback_to_a_thinking_budget_keeps_it_below_the_limit_and_the_limit_within_the_model_s_maximum():
    body = {"max_tokens": 8000, "thinking": {"type": "adaptive"}, "tool_choice": {"type": "tool", "name": "x"}}
    new = _budget_thinking(body, 16000, 64000)
    assert new["thinking"] == {"type": "enabled", "budget_tokens": 7999} and new["max_tokens"] == 8000
    assert new["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}    # no forced tool with thinking
    # a limit with no room for the least budget is raised to twice it, but not past the maximum
    assert _budget_thinking({"max_tokens": 1000}, 16000, 64000) == \
        {"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 2047}}
    assert _budget_thinking({"max_tokens": 1000}, 16000, 1500)["thinking"]["budget_tokens"] == 1499


def test_usage_splits_cache_writes_by_lifetime_and_says_whether_thinking_was_reported():
    p = built("claude-opus-4-7")
    usage = SimpleNamespace(input_tokens=300, output_tokens=400, cache_read_input_tokens=2000,
                            cache_creation_input_tokens=1500,
                            cache_creation=SimpleNamespace(ephemeral_5m_input_tokens=1000, ephemeral_1h_input_tokens=500),
                            output_tokens_details=SimpleNamespace(thinking_tokens=250))
    got = p._usage(SimpleNamespace(usage=usage))
    assert (got.input, got.output, got.reasoning, got.reasoning_reported) == (300, 400, 250, True)
    assert (got.cache_read, got.cache_write, got.cache_write_long) == (2000, 1000, 500)
    plain = p._usage(SimpleNamespace(usage=SimpleNamespace(input_tokens=10, output_tokens=5)))
    assert (plain.input, plain.output, plain.cache_write, plain.reasoning, plain.reasoning_reported) == (10, 5, 0, 0, False)
    assert p._usage(SimpleNamespace()).reasoning_reported is False


def test_a_refusal_or_a_full_context_window_ends_the_answer_and_max_tokens_is_a_truncation():
    p = built("claude-opus-4-7")
    answer = lambda stop: SimpleNamespace(stop_reason=stop)  # noqa: E731
    assert p._refusal(answer("refusal")) == "the model declined to answer (stop_reason=refusal)"
    assert "filled the model's context window" in p._refusal(answer("model_context_window_exceeded"))
    assert p._refusal(answer("end_turn")) is None and p._refusal(answer("max_tokens")) is None
    assert p._truncated(answer("max_tokens")) and not p._truncated(answer("end_turn"))


def test_the_repair_turn_answers_every_tool_call_and_a_note_joins_the_last_user_turn():
    p = built("claude-opus-4-7")
    uses = [SimpleNamespace(type="tool_use", id=f"t{i}", name="submit_kernel", input={"source": "x"}) for i in (1, 2)]
    body = {"messages": [{"role": "user", "content": "make it faster"}]}
    repaired = p._repair_body(body, SimpleNamespace(content=uses), "$.rationale: missing")
    results = repaired["messages"][2]["content"]
    assert [(r["tool_use_id"], r["is_error"]) for r in results] == [("t1", True), ("t2", True)]
    assert "$.rationale: missing" in results[0]["content"]
    assert results[1]["content"] == "ignored: only one submit_kernel call is used"
    assert len(body["messages"]) == 1                                   # the body sent is not changed
    noted = p._add_user_text(body, "keep it shorter")
    assert noted["messages"] == [{"role": "user", "content": [{"type": "text", "text": "make it faster"},
                                                              {"type": "text", "text": "keep it shorter"}]}]
    after = p._add_user_text(repaired, "again")
    assert after["messages"][-1]["content"][-1] == {"type": "text", "text": "again"}
