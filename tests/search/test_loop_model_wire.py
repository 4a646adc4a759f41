"""Issue 32's done-when for the wire and the money, through the loop, the real SDKs and the loopback:

* a scripted run that injects every mid-stream failure ends with every proposal either answered or
  recorded as failed with its cost, and no repair paid for a failure;
* the worst case printed before a run is never below what a scripted run records."""
from __future__ import annotations

import json

import pytest

from kernel_forge.app.budget_line import estimate
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.proposers.models import make_model_proposer

from tests.support.fakes import vector_add
from tests.support.loop_runs import new_run, read
from tests.support.loopback import text, tool

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

KEY = "sk-loop-wire-0123456789"

#: route -> (model spec, server, the faults one proposal each meets: (reply modifier, transient))
FAULTS = {
    "anthropic": ("anthropic:claude-sonnet-5-5", None, [
        (lambda r: r.fails_midstream("error", "overloaded_error"), True),
        (lambda r: r.fails_midstream("error", "api_error", "Internal server error"), True),
        (lambda r: r.fails_midstream("drop"), True),
        (lambda r: r.fails_midstream("error", "invalid_request_error", "prompt too long"), False),
        (lambda r: r.stopped("refusal"), False),
        (lambda r: r.stopped("context"), False)]),
    "responses": ("openai:gpt-6.2-sol", None, [
        (lambda r: r.fails_midstream("error", "server_error"), True),
        (lambda r: r.fails_midstream("failed", "server_error", "The server had an error"), True),
        (lambda r: r.fails_midstream("failed", "rate_limit_exceeded", "Slow down"), True),
        (lambda r: r.fails_midstream("drop"), True),
        (lambda r: r.fails_midstream("failed", "invalid_prompt", "Invalid prompt"), False),
        (lambda r: r.stopped("filter"), False),
        (lambda r: r.stopped("refusal"), False)]),
    "chat": ("openai:served-model", "vllm", [
        (lambda r: r.fails_midstream("error", "server_error"), True),
        (lambda r: r.fails_midstream("drop"), True),
        (lambda r: r.fails_midstream("error", "invalid_request_error", "bad"), False),
        (lambda r: r.stopped("filter"), False)]),
}


@pytest.fixture(autouse=True)
def _clean(clean_env):
    """No ambient credentials, base URLs or proxies."""


def _proposer(route: str, server, **kw):
    spec, local, _ = FAULTS[route]
    url = server.anthropic_base_url if route == "anthropic" else server.openai_base_url
    extra = {"server": local, "prices": {spec: [0.5, 2.0]}} if local else {}
    return make_model_proposer(spec, base_url=url, api_key=KEY, request_timeout_s=5, sleep=lambda s: None, **extra, **kw)


@pytest.mark.parametrize("route", sorted(FAULTS))
def test_a_run_meeting_every_mid_stream_failure_answers_or_records_each_proposal_with_its_cost(tmp_path, loopback, route):
    faults = FAULTS[route][2]
    for i, (fault, transient) in enumerate(faults):
        answer = {"source": vector_add(f"pass {400 - 10 * i}"), "rationale": f"variant {i}"}
        loopback.script(route, fault(tool(answer, output_tokens=900)), *([tool(answer)] if transient else []))
    opt = new_run(tmp_path, proposer=_proposer(route, loopback), max_iterations=len(faults))
    summary = opt.run()

    assert loopback.unscripted == [] and loopback.pending(route) == 0    # no repair turn, no extra call
    assert all(not any(m.get("role") == "assistant" for m in (r.body.get("messages") or r.body.get("input") or [])
                       if isinstance(m, dict)) for r in loopback.requests(route))
    calls = [read(opt.run_dir, p.name) for p in opt.run_dir.model_calls()]
    assert len(calls) == len(faults) and summary["iterations"] == len(faults)
    hist = read(opt.run_dir, "history.json")
    answered = [a for a in hist["attempts"] if a["proposer"] != "initial"]
    for (fault, transient), call in zip(faults, calls):
        assert call["cost_usd"] > 0                                        # every call is paid for, as billed
        if transient:
            assert call["error"] is None and call["attempts"] == 2 and call["billed_failed_attempts"] == 1
        else:
            assert call["error"] and call["attempts"] == 1
    assert len(answered) == sum(t for _, t in faults)
    assert summary["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls), abs=1e-6)


def test_the_worst_case_printed_before_a_run_is_not_below_what_a_scripted_run_records(tmp_path, loopback):
    """Every proposal takes the dearest path there is: cut off at its limit, asked again at twice
    the limit and answered unusably at nearly that, repaired, and cut off again."""
    spec = "anthropic:claude-haiku-4-5"
    iterations, candidates = 2, 2
    for i in range(iterations * candidates):
        loopback.script("anthropic", tool({"source": vector_add(f"pass {300 + i}"), "rationale": "r"},
                                          output_tokens=10**6),                    # cut off at 32,000
                        text("No kernel this time.", output_tokens=63_999),        # unusable, at the cap
                        text("Still thinking ...", output_tokens=10**6))           # the repair, cut off
    prop = ProposerConfig(models=[spec], base_url=loopback.url)
    loop = dict(max_iterations=iterations, candidates=candidates)
    proposer = make_model_proposer(spec, base_url=loopback.anthropic_base_url, api_key=KEY, request_timeout_s=5,
                                   sleep=lambda s: None, parallel=1)
    opt = new_run(tmp_path, proposer=proposer, prop=prop, **loop)
    summary = opt.run()

    calls = [read(opt.run_dir, p.name) for p in opt.run_dir.model_calls()]
    assert len(calls) == 3 * iterations * candidates and loopback.unscripted == []
    assert [c["output_tokens"] for c in calls[:3]] == [32_000, 63_999, 64_000]
    worst = estimate(LoopConfig(archive="off", **loop), prop, opt.task)
    assert worst.calls == len(calls)
    assert worst.usd >= summary["cost_usd"] > 0, (worst.usd, summary["cost_usd"])
    print(json.dumps({"worst_case_usd": worst.usd, "recorded_usd": summary["cost_usd"]}))
