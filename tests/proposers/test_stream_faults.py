"""Failures that arrive inside a streamed answer, after HTTP 200 (issue 32 item 4), through the real
SDKs against the loopback: a transient one (Anthropic ``overloaded_error`` / ``api_error`` events,
OpenAI's Responses ``error`` event and ``response.failed``, a Chat Completions error chunk, a
connection that closes mid-answer) is retried as an HTTP 429/5xx is; a stop no repair can mend
(Anthropic ``refusal`` and ``model_context_window_exceeded``, a content filter, a refusal) is a
failed call with its reason, never a paid repair turn.  Every attempt that began is paid for: the
tokens billed before the failure are in the call's cost (issue 32 item 7)."""
from __future__ import annotations

import pytest

from kernel_forge.proposers.budget import Budget

from tests.support.generic_proposers import GOOD, REQUEST, make
from tests.support.loopback import tool

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

#: route -> (provider for make(), model): Anthropic Messages, OpenAI Responses (a listed OpenAI model
#: behind the loopback), Chat Completions (a model the table does not list behind a base URL)
ROUTES = {"anthropic": ("anthropic", None), "responses": ("openai", "gpt-5"), "chat": ("openai", None)}
PRICES = {"anthropic:claude-test-1": {"input": 3.0, "output": 15.0},
          "openai:qwen-test": {"input": 1.25, "output": 10.0},
          "openai:gpt-5": {"input": 1.25, "cached_input": 0.125, "output": 10.0}}


@pytest.fixture(autouse=True)
def _clean_env(clean_env):
    """No ambient credentials, base URLs or proxies."""


def proposer(route: str, server, **kw):
    provider, model = ROUTES[route]
    kw.setdefault("prices", PRICES)
    return make(provider, server, model=model, **kw)


TRANSIENT = [("anthropic", "error", "overloaded_error"), ("anthropic", "error", "api_error"),
             ("anthropic", "drop", ""), ("responses", "error", "server_error"),
             ("responses", "failed", "server_error"), ("responses", "drop", ""),
             ("chat", "error", "server_error"), ("chat", "drop", "")]


@pytest.mark.parametrize("route,what,etype", TRANSIENT)
def test_a_transient_failure_mid_stream_is_retried_and_the_failed_attempt_is_paid_for(loopback, route, what, etype):
    loopback.script(route, tool(GOOD, input_tokens=4000, output_tokens=800).fails_midstream(what, etype),
                    tool(GOOD, input_tokens=4000, output_tokens=800))
    p = proposer(route, loopback)
    result = p.propose(REQUEST)

    assert result.errors == [] and len(result.proposals) == 1        # answered on the second attempt
    (call,) = result.calls
    assert call.attempts == 2 and call.billed_failed_attempts == 1 and call.error is None
    assert len(loopback.requests(route if route != "responses" else "responses")) == 2   # no repair turn
    answered = 4000 * PRICES[p.name]["input"] / 1e6 + 800 * PRICES[p.name]["output"] / 1e6
    # the failed attempt's tokens are in the call: its input as reported where the provider had reported
    # it (Anthropic message_start, Responses response.failed), else estimated from the body sent; the
    # output that had arrived counted at a token per 3 characters; an estimate is labelled so
    assert call.cost_usd > answered
    if route == "anthropic" and what == "error" or what == "failed":
        assert call.input_tokens == 8000
    else:
        assert call.input_tokens > 4000 and call.usage_estimated


@pytest.mark.parametrize("route,etype", [("anthropic", "invalid_request_error"), ("responses", "invalid_prompt"),
                                         ("chat", "invalid_request_error")])
def test_an_error_mid_stream_that_does_not_pass_is_a_failed_call_with_its_cost(loopback, route, etype):
    loopback.script(route, tool(GOOD, input_tokens=4000).fails_midstream("error", etype, "bad prompt"), tool(GOOD))
    budget = Budget(5.0)
    result = proposer(route, loopback, budget=budget).propose(REQUEST)

    assert result.proposals == [] and loopback.pending(route) == 1     # neither retried nor repaired
    (call,) = result.calls
    assert call.attempts == 1 and etype in call.error and call.cost_usd > 0
    assert budget.spent == pytest.approx(call.cost_usd) and budget.reserved == 0
    assert "request failed after 1 attempt(s)" in result.errors[0]


STOPS = [("anthropic", "refusal", "stop_reason=refusal"),
         ("anthropic", "context", "stop_reason=model_context_window_exceeded"),
         ("responses", "filter", "content_filter"), ("responses", "refusal", "declined"),
         ("chat", "filter", "finish_reason=content_filter")]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("route,why,said", STOPS)
def test_a_stop_no_repair_can_mend_is_recorded_as_failed_not_repaired(loopback, route, why, said, stream):
    loopback.script(route, tool(GOOD, input_tokens=3000, output_tokens=40).stopped(why), tool(GOOD))
    result = proposer(route, loopback, stream=stream).propose(REQUEST)

    assert result.proposals == [] and loopback.pending(route) == 1     # no repair turn was paid for
    (call,) = result.calls
    assert call.error.startswith("not answered:") and said in call.error and "no repair asked" in call.error
    assert call.input_tokens == 3000 and call.cost_usd > 0              # what it cost is recorded
    assert said in result.errors[0]


@pytest.mark.slow
@pytest.mark.parametrize("route", ["anthropic", "responses", "chat"])
def test_keepalives_keep_a_slow_stream_open_past_the_silence_timeout(loopback, route):
    """Events 0.5 s apart with a 0.3 s timeout: the keepalives (Anthropic ping events, Responses keepalive
    events, SSE comments)
    between them are read, so the timeout counts silence, not the time the answer takes."""
    loopback.script(route, tool(GOOD).trickle(0.5).keepalive(0.1))
    result = proposer(route, loopback, request_timeout_s=0.3).propose(REQUEST)
    assert result.errors == [] and len(result.proposals) == 1
    assert result.calls[0].attempts == 1 and result.calls[0].timeouts == 0


# ------------------------------------------------------------------------- the Responses wire (item 10)

def test_the_responses_repair_resends_the_answer_s_message_with_its_id_status_and_phase(loopback):
    from tests.support.loopback import text

    loopback.script("responses", text("I would unroll the loop, but here is no kernel."), tool(GOOD))
    result = proposer("responses", loopback, answer_format="fenced").propose(REQUEST)
    assert result.errors == [] and len(result.proposals) == 1
    first, repair = (r.body for r in loopback.requests("responses"))
    answer = next(i for i in result.calls[0].response["output"] if i["type"] == "message")
    resent = next(i for i in repair["input"] if isinstance(i, dict) and i.get("role") == "assistant")
    assert (resent["type"], resent["id"], resent["status"], resent["phase"]) == \
        ("message", answer["id"], "completed", "final_answer")
    assert resent["content"] == [{"type": "output_text", "text": "I would unroll the loop, but here is no kernel.",
                                  "annotations": []}]
    # reasoning is on (effort high): its summary is asked for
    assert first["reasoning"] == {"effort": "high", "summary": "auto"}


def test_a_whole_responses_answer_that_failed_is_retried_and_what_it_reported_is_paid_for(loopback):
    from tests.support.loopback import raw

    failed = {"id": "resp_failed_1", "object": "response", "created_at": 1, "model": "gpt-5", "status": "failed",
              "error": {"code": "server_error", "message": "The server had an error"}, "incomplete_details": None,
              "output": [], "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
              "usage": {"input_tokens": 5000, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 100,
                        "output_tokens_details": {"reasoning_tokens": 100}, "total_tokens": 5100}}
    loopback.script("responses", raw(200, failed), tool(GOOD, input_tokens=5000, output_tokens=800))
    result = proposer("responses", loopback, stream=False).propose(REQUEST)
    assert result.errors == [] and len(result.proposals) == 1
    (call,) = result.calls
    assert call.attempts == 2 and call.billed_failed_attempts == 1 and not call.usage_estimated
    assert (call.input_tokens, call.output_tokens) == (10_000, 900)


def test_a_retry_after_a_billed_failure_must_fit_what_is_left_of_the_budget(loopback):
    """The dropped attempt's tokens are spent; the retry's worst case no longer fits the budget, so it
    is not made: the call is recorded with what the failed attempt cost, and the budget holds."""
    loopback.script("anthropic", tool(GOOD, input_tokens=4000, output_tokens=800).fails_midstream("drop"), tool(GOOD))
    p = proposer("anthropic", loopback)
    worst = p._worst_case(p._initial(REQUEST, 0, p._plan(REQUEST, 1)))[0]
    budget = Budget(worst * 1.05)                 # room for one worst case, not one more after a billed drop
    result = p.__class__.propose(_with_budget(p, budget), REQUEST)
    (call,) = result.calls
    assert result.proposals == [] and result.budget_exhausted and loopback.pending("anthropic") == 1
    assert call.attempts == 1 and call.billed_failed_attempts == 1 and "the call was not made" in call.error
    assert budget.spent == pytest.approx(call.cost_usd) and call.cost_usd > 0 and budget.reserved == 0
    assert budget.spent <= budget.limit


def _with_budget(p, budget):
    p.budget = budget
    return p
