"""Every model of the capability table, through the real SDKs, against the loopback server that
answers as each provider documents (tests/support/loopback.py): the first request is right (no 400 round
trip), answers are not cut off, usage is the provider's own, the prompt cache is read by n-1 of
every fan-out, and the budget refuses a call it cannot afford.  No other address is contacted."""
from __future__ import annotations


import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.proposers import capabilities
from kernel_forge.proposers.base import ProposalRequest, ProposalSlot
from kernel_forge.proposers.budget import Budget
from kernel_forge.proposers.models import make_model_proposer

from tests.support.fakes import vector_add
from tests.support.loop_runs import MANIFEST, new_run, read
from tests.support.loopback import Loopback, tool
from tests.support.table_proposers import KEYS, proposer_for, spec_of

MODELS = sorted(capabilities.entries())


def _shape(caps) -> tuple:
    """What decides a request's form: two models alike in it differ only in their numbers (output,
    context, cache minimum), which expect_body reads from the entry."""
    return (caps.key.split(":")[0], caps.api, caps.thinking_modes, caps.thinking_off, caps.effort,
            caps.default_effort, caps.temperature, caps.forced_tool_choice, caps.limit_field, caps.cache,
            caps.cache_ttls, caps.min_cache_tokens is None)


def _first_of_each_shape(keys: list[str]) -> list:
    """Every model, the first of each request shape in the default run and the others marked slow
    (``make test-slow`` and CI run them)."""
    seen: set = set()
    out = []
    for key in keys:
        shape = _shape(capabilities.entries()[key])
        out.append(key if shape not in seen else pytest.param(key, marks=pytest.mark.slow))
        seen.add(shape)
    return out


#: a realistic answer: most of it thinking, then a whole kernel
THINKING_ANSWER = 14_000
PLAIN_ANSWER = 3_000

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


@pytest.fixture(autouse=True)
def _clean_env(clean_env):
    """No ambient credentials, base URLs or proxies reach the SDK clients."""


def expect_body(caps, provider: str, body: dict) -> None:
    """What the request to ``caps``'s model must carry, by its table entry."""
    thinks = caps.can_think
    if provider == "anthropic":
        assert body["max_tokens"] == min(caps.max_output, 32000 if thinks else 16000)
        kind = (body.get("thinking") or {}).get("type")
        if "adaptive" in caps.thinking_modes or "always" in caps.thinking_modes:
            assert kind == "adaptive"
        elif "budget" in caps.thinking_modes:
            assert kind == "enabled" and 1024 <= body["thinking"]["budget_tokens"] < body["max_tokens"]
        else:
            assert kind is None
        if caps.effort:
            assert body["output_config"]["effort"] == caps.best_effort("high")
        else:
            assert "output_config" not in body
        assert "tools" not in body and "tool_choice" not in body          # the kernel comes as text
        assert "temperature" not in body
    elif caps.api == "responses":
        assert body["max_output_tokens"] == min(caps.max_output, 32000 if caps.effort else 16000)
        if caps.effort:
            assert body["reasoning"] == {"effort": caps.best_effort("high"), "summary": "auto"}
            assert body["include"] == ["reasoning.encrypted_content"] and body["store"] is False
        else:
            assert "reasoning" not in body
        assert body["prompt_cache_key"].startswith("kforge-") and "temperature" not in body
        assert [p["type"] for p in body["input"][0]["content"]] == ["input_text"] * len(body["input"][0]["content"])
    else:
        # the output asked for, lowered where the window leaves the prompt less room (llama.cpp, Ollama: 8,192 in all)
        from kernel_forge.proposers.budget import estimate_tokens
        assert body["max_tokens"] == min(caps.default_output(False), caps.context - estimate_tokens(body))
        assert "reasoning_effort" not in body
        assert body["stream_options"] == {"include_usage": True}


ANTHROPIC_USAGE = {"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
                   "cache_creation", "output_tokens_details"}


@pytest.mark.parametrize("key", _first_of_each_shape(MODELS))
def test_two_iterations_of_four_candidates_make_no_400_and_no_truncation(tmp_path, loopback, key):
    caps = capabilities.entries()[key]
    provider, spec, local = spec_of(key)
    size = THINKING_ANSWER if caps.can_think else PLAIN_ANSWER
    loopback.script(provider, *[tool({"source": vector_add(f"pass {400 - 10 * i}"), "rationale": f"variant {i}"},
                                     output_tokens=size) for i in range(8)])
    proposer = proposer_for(key, loopback)
    prop = ProposerConfig(models=[spec], base_url=loopback.url, server=local or "auto",
                          prices={spec: [0.1, 0.2]} if local else {})
    opt = new_run(tmp_path, proposer=proposer, prop=prop, max_iterations=2, candidates=4)
    summary = opt.run()

    assert loopback.rejected == [], [r.message for r in loopback.rejected]          # no 400 round trip
    calls = [read(opt.run_dir, p.name) for p in opt.run_dir.model_calls()]
    assert len(calls) == 8 and summary["iterations"] == 2 and loopback.unscripted == []
    assert all(c["error"] is None for c in calls), [c["error"] for c in calls]     # none cut off, none invalid
    for c in calls:
        expect_body(caps, provider, c["request"])
        assert c["capability"] == key and c["output_tokens"] == size
        usage = c["response"]["usage"]
        if provider == "anthropic":
            assert set(usage) <= ANTHROPIC_USAGE
            assert c["reasoning_tokens"] == usage["output_tokens_details"]["thinking_tokens"] > 0
            assert c["cache_read_tokens"] == usage["cache_read_input_tokens"]
        elif caps.api == "responses":
            assert c["reasoning_tokens"] == usage["output_tokens_details"]["reasoning_tokens"]
            assert c["cache_read_tokens"] == usage["input_tokens_details"]["cached_tokens"]
            assert c["input_tokens"] == usage["input_tokens"]
        else:                             # a local server reports only the totals
            assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens"}
            assert c["reasoning_reported"] is False and c["cost_usd"] > 0
    assert summary["best"]["proposer"] == spec
    report = (opt.run_dir.path / "report.md").read_text()
    assert "## Model cost" in report and f"| {spec} | 8 |" in report
    assert "| 1 | 4 |" in report and "| 2 | 4 |" in report                  # per iteration
    assert f"{sum(c['cost_usd'] for c in calls):.4f} |" in report


def shared_request(n: int, iteration: int) -> ProposalRequest:
    """A request like the loop's: a long static part, a long part every proposal shares, a direction each."""
    static = "# Task: saxpy\n" + "The reference and the device, described at length.\n" * 400
    common = f"# Current best: a{iteration:04d}\n" + f"kernel source line {iteration}\n" * 300
    prompts = [f"{common}\n\n# Direction for this proposal\ndirection {i}" for i in range(n)]
    return ProposalRequest(system="You write CUDA kernels.", prompt=prompts[0], n=n, iteration=iteration,
                           static_prefix=static,
                           slots=[ProposalSlot(prompt=p, direction=f"direction {i}") for i, p in enumerate(prompts)])


@pytest.mark.parametrize("key", ["anthropic:claude-opus-5-5", "anthropic:claude-haiku-4-5", "openai:gpt-6.2-sol",
                                 "openai:gpt-5.5"])
def test_n_minus_one_of_each_fan_out_read_the_cache(key):
    from tests.support.loopback import _openai_breakpoints, openai_breakpoint_cache, tokens_of

    provider = key.split(":")[0]
    server = Loopback(start_delay=0.3).start()       # a response starts 0.3 s after its request arrives
    try:
        p = proposer_for(key, server)
        for iteration in (1, 2, 3):
            server.script(provider, *[tool({"source": vector_add(f"pass {i}"), "rationale": "r"}, output_tokens=900)
                                      for i in range(4)])
            before = len(server.received)
            result = p.propose(shared_request(4, iteration))
            assert result.errors == [] and server.rejected == []
            calls = result.calls
            arrivals = [r.time for r in server.received[before:]]
            # one request first; the other three only once its answer had begun
            assert min(arrivals[1:]) - arrivals[0] >= 0.25
            readers = [c for c in calls[1:] if c.cache_read_tokens > 0]
            assert len(readers) == 3, [(c.cache_read_tokens, c.cache_write_tokens) for c in calls]
            first = calls[0]
            if provider == "anthropic":
                # the first writes the shared part (reading the run's part from the iteration before)
                assert first.cache_write_tokens > 0 and (first.cache_read_tokens > 0) == (iteration > 1)
                for c in readers:            # the others read all of it and write nothing
                    assert c.cache_write_tokens == 0
                    assert c.cache_read_tokens == first.cache_read_tokens + first.cache_write_tokens
            elif openai_breakpoint_cache(key.split(":")[1]):
                # gpt-5.6 and later: exactly the prefix up to the shared sections' breakpoint
                shared = tokens_of(_openai_breakpoints(server.received[before].body)[1][0])
                assert [c.cache_read_tokens for c in readers] == [shared] * 3
            else:
                shared = first.cache_read_tokens + first.cache_write_tokens
                for c in readers:            # the shared prefix, in 128-token steps
                    assert c.cache_read_tokens >= shared - 2 * 128 - 64
            for c in calls:
                assert c.plan["cache"]["on"] is True and c.plan["cache"]["min_tokens"] >= 512
    finally:
        server.stop()


def test_requests_sent_all_at_once_would_each_write_the_cache():
    """The loopback's cache is not generous: the fan-out without a first request writes n times."""
    server = Loopback(start_delay=0.3).start()
    try:
        p = proposer_for("anthropic:claude-opus-5-5", server)
        p._primed = True                                       # the run's first request is behind us
        p.prompt_cache = True
        server.script("anthropic", *[tool({"source": vector_add(f"pass {i}"), "rationale": "r"}) for i in range(4)])
        plan = p._plan(shared_request(4, 1), 4)
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda i: p._one(shared_request(4, 1), i, 4, plan), range(4)))
        writes = [o.calls[0].cache_write_tokens for o in outs]
        assert all(w > 0 for w in writes) and all(o.calls[0].cache_read_tokens == 0 for o in outs)
    finally:
        server.stop()


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.mark.parametrize("key, wait, short, long", [
    ("anthropic:claude-opus-5-5", 400.0, None, "1h"),
    ("openai:gpt-6.2-sol", 2400.0, None, "12h"),
])
def test_the_long_cache_lifetime_once_an_iteration_outlasts_the_short_one(loopback, key, wait, short, long):
    provider = key.split(":")[0]
    clock = Clock()
    p = proposer_for(key, loopback, clock=clock)
    for _ in range(3):
        loopback.script(provider, *[tool({"source": vector_add("pass 1"), "rationale": "r"}) for _ in range(2)])

    def ttl_of(body: dict):
        if provider == "anthropic":
            return body["messages"][0]["content"][0]["cache_control"].get("ttl")
        assert "prompt_cache_options" not in body         # the lifetime rides on the run's part's breakpoint
        return body["input"][0]["content"][0]["prompt_cache_breakpoint"].get("ttl")

    p.propose(shared_request(2, 1))                   # the first iteration: the default lifetime
    clock.t += 60
    p.propose(shared_request(2, 2))                   # a quick one: still the default
    clock.t += wait
    p.propose(shared_request(2, 3))                   # longer than the short lifetime: the long one
    bodies = [r.body for r in loopback.requests(provider)]
    assert [ttl_of(b) for b in bodies] == [short] * 4 + [long] * 2
    assert loopback.rejected == []                    # a 1 h breakpoint before a 5 min one is valid
    if provider == "anthropic":                       # the shared part keeps the 5-minute default
        assert "ttl" not in bodies[-1]["messages"][0]["content"][1]["cache_control"]
    else:                                             # ... and the 30-minute one
        assert bodies[-1]["input"][0]["content"][1]["prompt_cache_breakpoint"] == {"mode": "explicit"}


def test_a_budget_below_one_worst_case_call_is_refused_before_any_call(tmp_path, loopback, monkeypatch):
    monkeypatch.chdir(MANIFEST.parents[1])
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEYS["anthropic"])
    r = CliRunner().invoke(cli, ["optimize", str(MANIFEST), "--model", "anthropic:claude-opus-5-5",
                                 "--base-url", loopback.url, "--budget-usd", "0.05",
                                 "--runs-dir", str(tmp_path / "runs")], catch_exceptions=False)
    assert r.exit_code == 2, r.output
    err = r.stderr
    assert "--budget-usd 0.05: one request to anthropic:claude-opus-5-5 may cost up to $0.6" in err
    assert "32000 output tokens at $20/M" in err and "no call was made" in err and "lower --max-output-tokens" in err
    assert loopback.received == [] and not (tmp_path / "runs").exists()


def test_a_call_that_does_not_fit_what_is_left_is_not_made(loopback):
    loopback.script("anthropic", *[tool({"source": vector_add("pass 1"), "rationale": "r"}, output_tokens=2000)
                                   for _ in range(4)])
    budget = Budget(0.5, spent_usd=0.2)
    p = proposer_for("anthropic:claude-opus-5-5", loopback, budget=budget)     # worst case ~$0.66 a call
    result = p.propose(shared_request(4, 1))
    assert result.calls == [] and loopback.received == [] and result.budget_exhausted is True
    assert len(result.errors) == 4
    assert "could cost up to $0.7" in result.errors[0] and "$0.3000 of --budget-usd 0.5 is left" in result.errors[0]
    assert budget.spent == pytest.approx(0.2) and budget.reserved == 0


def test_parallel_calls_hold_their_worst_case_so_together_they_cannot_overshoot(loopback):
    loopback.script("anthropic", *[tool({"source": vector_add("pass 1"), "rationale": "r"}, output_tokens=2000)
                                   for _ in range(4)])
    p = proposer_for("anthropic:claude-opus-5-5", loopback, max_tokens=4000, budget=Budget(0.25))
    result = p.propose(shared_request(4, 1))
    made = len(result.calls)
    worst = max(c.plan["budget_reserved_usd"] for c in result.calls)
    assert 1 <= made < 4 and made * worst <= 0.25 + worst    # only as many as fitted at their worst
    assert sum(c.cost_usd for c in result.calls) <= 0.25
    assert result.budget_exhausted and any("the call was not made" in e for e in result.errors)


def test_settings_a_model_cannot_take_are_adjusted_before_the_first_request(loopback):
    loopback.script("anthropic", tool({"source": vector_add("pass 1"), "rationale": "r"}))
    p = proposer_for("anthropic:claude-opus-5-5", loopback, thinking="disabled", reasoning_effort="max",
                     temperature=0.3)
    result = p.propose(ProposalRequest(system="s", prompt="make it faster"))
    (req,) = loopback.requests("anthropic")
    assert req.body["thinking"] == {"type": "adaptive"} and req.body["output_config"] == {"effort": "max"}
    assert "temperature" not in req.body and loopback.rejected == [] and result.errors == []
    notes = result.calls[0].plan["adjustments"]
    assert any("always thinks" in n for n in notes) and any("no temperature" in n for n in notes)


@pytest.mark.parametrize("key, asked, sent", [
    ("anthropic:claude-opus-4-6", "xhigh", "high"),        # no xhigh before Opus 4.7
    ("anthropic:claude-opus-4-5", "max", "high"),
    ("openai:gpt-6.2-sol", "none", "low"),                # the API rejects none
    ("openai:gpt-5", "xhigh", "high"),
])
def test_an_effort_the_model_does_not_list_is_stepped_to_one_it_does(loopback, key, asked, sent):
    provider = key.split(":")[0]
    loopback.script(provider, tool({"source": vector_add("pass 1"), "rationale": "r"}))
    p = proposer_for(key, loopback, reasoning_effort=asked)
    assert p.propose(ProposalRequest(system="s", prompt="p")).errors == []
    body = loopback.requests(provider)[0].body
    got = body["output_config"]["effort"] if provider == "anthropic" else body["reasoning"]["effort"]
    assert got == sent and loopback.rejected == []


def test_the_loopback_rejects_what_the_provider_documents_for_every_model(loopback):
    """The loopback's own rules are the providers' rules for every model; none comes from models.json."""
    import anthropic
    import openai

    a = anthropic.Anthropic(api_key="k", base_url=loopback.url, max_retries=0, timeout=10)
    many = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
    cases = [
        (dict(model="claude-opus-4-5", max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 2000}),
         "`max_tokens` must be greater than `thinking.budget_tokens`"),
        (dict(model="claude-opus-4-5", max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 512}),
         "greater than or equal to 1024"),
        (dict(model="claude-opus-5-5", max_tokens=1000, messages=[{"role": "user", "content": many}]),
         "A maximum of 4 blocks with cache_control"),
        (dict(model="claude-opus-5-5", max_tokens=1000, messages=[{"role": "user", "content": [
            {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]),
         "must not come after"),
    ]
    for kw, words in cases:
        kw.setdefault("messages", [{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.BadRequestError) as info:
            a.messages.create(**kw)
        assert words in str(info.value), (kw, str(info.value))
        assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "invalid_request_error"
    o = openai.OpenAI(api_key="k", base_url=loopback.openai_base_url, max_retries=0)
    for kw, words, param in [
        (dict(model="gpt-6-sol", store=False, input=[{"type": "reasoning", "id": "rs_1", "summary": []},
                                                     {"role": "user", "content": "again"}]),
         "Items are not persisted when `store` is set to false", "input"),
        (dict(model="gpt-6-sol", previous_response_id="resp_never"), "not found", "previous_response_id"),
    ]:
        kw.setdefault("input", "hi")
        with pytest.raises(openai.BadRequestError) as info:
            o.responses.create(**kw)
        assert words in str(info.value) and info.value.body["param"] == param
    assert len(loopback.rejected) == len(cases) + 2 and loopback.unscripted == [] and loopback.invalid == []


def test_the_loopback_rejects_a_field_or_value_the_installed_sdk_does_not_define(loopback):
    import anthropic
    import openai

    loopback.expect_invalid = True
    a = anthropic.Anthropic(api_key="k", base_url=loopback.url, max_retries=0, timeout=10)
    hi = [{"role": "user", "content": "hi"}]
    for kw, words in [
        (dict(extra_body={"output_config": {"effort": "ultra"}}), "$.output_config.effort: 'ultra' is not one of"),
        (dict(extra_body={"thinking": {"type": "sometimes"}}), "'sometimes' is not one of"),
        (dict(extra_body={"reasoning_budget": 5}), "has no field 'reasoning_budget'"),
    ]:
        with pytest.raises(anthropic.BadRequestError) as info:
            a.messages.create(model="claude-opus-5-5", max_tokens=1000, messages=hi, **kw)
        assert words in str(info.value), str(info.value)
    o = openai.OpenAI(api_key="k", base_url=loopback.openai_base_url, max_retries=0)
    for call, words in [
        (lambda: o.responses.create(model="gpt-6-sol", input="hi", extra_body={"reasoning": {"effort": "ultra"}}),
         "$.reasoning.effort: 'ultra' is not one of"),
        (lambda: o.responses.create(model="gpt-6-sol", input="hi", extra_body={"max_tokens": 100}),
         "has no field 'max_tokens'"),
        (lambda: o.chat.completions.create(model="m", messages=hi, extra_body={"max_output_tokens": 100}),
         "has no field 'max_output_tokens'"),
    ]:
        with pytest.raises(openai.BadRequestError) as info:
            call()
        assert words in str(info.value), str(info.value)
    assert len(loopback.invalid) == 6 and loopback.unscripted == []


def test_an_unlisted_model_learns_a_rejected_parameter_once_for_the_whole_fan_out(loopback):
    from tests.support.loopback import error

    loopback.script("openai", error(400, "Unsupported value: 'reasoning.effort' does not support 'high' with this "
                                         "model. Supported values are: 'low' and 'medium'."),
                    *[tool({"source": vector_add(f"pass {i}"), "rationale": "r"}) for i in range(4)])
    p = make_model_proposer("openai:gpt-7-preview", api_key=KEYS["openai"], base_url=None, request_timeout_s=5)
    p._client = p._client.with_options(base_url=loopback.openai_base_url)   # OpenAI's own API, here the loopback
    result = p.propose(shared_request(4, 1))
    bodies = [r.body for r in loopback.requests("openai")]
    assert result.errors == [] and len(bodies) == 5           # one 400, on the first request only
    assert [b["reasoning"]["effort"] for b in bodies] == ["high", "medium", "medium", "medium", "medium"]
    assert p.relaxed == {"effort_value"}


def test_the_repair_turn_keeps_the_reasoning_with_store_false(loopback):
    from tests.support.loopback import text

    loopback.script("openai", text("I would tile it, but here is no code."),
                    tool({"source": vector_add("pass 1"), "rationale": "tiled"}))
    p = proposer_for("openai:gpt-6.2-sol", loopback)
    result = p.propose(ProposalRequest(system="s", prompt="make it faster"))
    assert result.errors == [] and loopback.rejected == []
    first, repair = (r.body for r in loopback.requests("openai"))
    answer = result.calls[0].response["output"]
    reasoning = [i for i in repair["input"] if i.get("type") == "reasoning"]
    # the first answer's reasoning goes back with its encrypted content (store: false keeps nothing)
    assert reasoning and reasoning[0]["encrypted_content"] == answer[0]["encrypted_content"]
    assert repair["store"] is False and "previous_response_id" not in repair
    # the assistant's turn as the output message it was (the SDK's ResponseOutputMessageParam): id,
    # status and phase kept
    message = next(i for i in answer if i["type"] == "message")
    assert repair["input"][-2] == {"type": "message", "id": message["id"], "role": "assistant", "status": "completed",
                                   "phase": "final_answer", "content": [
                                       {"type": "output_text", "text": "I would tile it, but here is no code.",
                                        "annotations": []}]}
    assert "could not be used" in repair["input"][-1]["content"][0]["text"]
    assert repair["input"][0] == first["input"][0]            # the same conversation, one turn longer


def test_edits_against_the_parent_come_back_as_the_whole_kernel(loopback):
    from tests.support.loopback import text

    parent = vector_add("pass 400")
    edit = parent.replace("pass 400", "pass 300")
    diff = "".join(f"<<<<<<< SEARCH\n{a}=======\n{b}>>>>>>> REPLACE\n"
                   for a, b in [(l + "\n", m + "\n") for l, m in zip(parent.splitlines(), edit.splitlines()) if l != m])
    answer = ("Fewer instructions per element.\n\n```diff\n" + diff + "```\n\n```json\n"
              '{"technique": "fused multiply-add", "direction": "compute", "predicted_speedup": 1.25}\n```\n')
    loopback.script("anthropic", text(answer))
    p = proposer_for("anthropic:claude-sonnet-5-5", loopback)
    result = p.propose(ProposalRequest(system="s", prompt="p", slots=[ProposalSlot(parent_source=parent)]))
    (prop,) = result.proposals
    assert prop.source.rstrip() == edit.rstrip() and prop.rationale == "Fewer instructions per element."
    assert (prop.predicted_speedup, prop.technique, prop.model_direction) == (1.25, "fused multiply-add", "compute")
    assert result.calls[0].error is None and loopback.rejected == []


def test_recorded_answers_in_every_format_replay(tmp_path):
    from kernel_forge.proposers.replay import load_proposals
    from tests.support.loopback import fenced_answer

    kernel = vector_add("pass 400")
    args = {"source": kernel, "rationale": "recorded", "tunables": {"BLOCK": [128]}}
    text_ = fenced_answer(args)
    records = [
        {"response": {"content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                  {"type": "text", "text": text_}]}},                        # Anthropic, fenced
        {"response": {"output": [{"type": "reasoning", "id": "rs_1", "summary": []},
                                 {"type": "message", "content": [{"type": "output_text", "text": text_}]}]}},
        {"response": {"output": [{"type": "function_call", "name": "submit_kernel", "arguments": json_dumps(args)}]}},
        {"response": {"choices": [{"message": {"content": text_}}]}},                          # a local server
    ]
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join(json_dumps(r) for r in records) + "\n")
    props = load_proposals(path)
    assert [p.source.rstrip() for p in props] == [kernel.rstrip()] * 4
    assert all(p.tunables == {"BLOCK": [128]} for p in props)


def json_dumps(obj) -> str:
    import json

    return json.dumps(obj)


# -- GPT-5.6 and later: the cache is matched exactly at breakpoints (issue 34) -------------------

def run_fan_outs(server: Loopback, p, iterations=(1, 2, 3), n: int = 4) -> list[tuple[list, list]]:
    """(calls, bodies) of each iteration of ``n`` proposals."""
    out = []
    for iteration in iterations:
        server.script("openai", *[tool({"source": vector_add(f"pass {i}"), "rationale": "r"}, output_tokens=900)
                                  for i in range(n)])
        before = len(server.received)
        result = p.propose(shared_request(n, iteration))
        assert result.errors == [] and server.rejected == [], [r.message for r in server.rejected]
        out.append((result.calls, [r.body for r in server.received[before:]]))
    return out


def test_three_iterations_of_four_candidates_on_gpt_5_6_read_the_cache_on_n_minus_one_at_the_breakpoints():
    from tests.support.loopback import _openai_breakpoints, openai_breakpoint_cache, tokens_of

    assert openai_breakpoint_cache("gpt-5.6-sol") and not openai_breakpoint_cache("gpt-5.5")
    server = Loopback(start_delay=0.3).start()
    try:
        p = proposer_for("openai:gpt-5.6-sol", server)
        for iteration, (calls, bodies) in enumerate(run_fan_outs(server, p), start=1):
            for b in bodies:                 # the run's part and the shared sections each end at a breakpoint
                assert [part.get("prompt_cache_breakpoint") for part in b["input"][0]["content"]] == [
                    {"mode": "explicit"}, {"mode": "explicit"}, None]
            static, shared, _implicit = (tokens_of(t) for t, _ in _openai_breakpoints(bodies[0]))
            first, others = calls[0], calls[1:]
            # the first reads the run's part written the iteration before, and writes the rest
            assert first.cache_read_tokens == (static if iteration > 1 else 0)
            assert first.cache_write_tokens > 0
            # the other three read exactly the shared prefix, at its breakpoint, not rounded to 128 tokens
            assert [c.cache_read_tokens for c in others] == [shared] * 3
            assert all(c.input_tokens - c.cache_read_tokens - c.cache_write_tokens < 50 for c in others)
    finally:
        server.stop()


def test_without_breakpoints_a_gpt_5_6_fan_out_reads_nothing_and_writes_every_request_whole():
    """The issue's inference, under the documented rule: the implicit breakpoint alone (the end of
    each prompt) is never shared by the proposals of a fan-out."""
    server = Loopback(start_delay=0.3).start()
    try:
        p = proposer_for("openai:gpt-5.6-sol", server)
        plain = p._input_parts
        p._input_parts = lambda plan, index: [{k: v for k, v in part.items() if k != "prompt_cache_breakpoint"}
                                              for part in plain(plan, index)]
        ((calls, bodies),) = run_fan_outs(server, p, iterations=(1,))
        assert all("prompt_cache_breakpoint" not in part for b in bodies for part in b["input"][0]["content"])
        assert [c.cache_read_tokens for c in calls] == [0] * 4
        assert all(c.cache_write_tokens == c.input_tokens for c in calls)
    finally:
        server.stop()


def long_static_short_alone(lines: int = 200) -> ProposalRequest:
    """A run's part under 4,096 tokens alone, over it with the shared sections."""
    static = "# Task: saxpy\n" + "The reference and the device, described at length.\n" * lines
    common = "# Current best: a0001\n" + "kernel source line of the current best\n" * 400
    prompts = [f"{common}\n\n# Direction for this proposal\ndirection {i}" for i in range(2)]
    return ProposalRequest(system="You write CUDA kernels.", prompt=prompts[0], n=2, iteration=1,
                           static_prefix=static,
                           slots=[ProposalSlot(prompt=p, direction=d) for p, d in zip(prompts, ["d0", "d1"])])


@pytest.mark.parametrize("key, minimum", [("anthropic:claude-opus-4-6", 4096), ("openai:gpt-5.6-sol", 1024)])
def test_the_run_s_part_gets_no_breakpoint_of_its_own_where_it_is_under_the_minimum_alone(loopback, key, minimum):
    """Issue 34: the minimum was checked against the whole shared prefix, so the run's part's (1 h)
    breakpoint could sit below it, cache nothing, and still be reported as on."""
    provider = key.split(":")[0]
    lines = 200 if provider == "anthropic" else 20
    loopback.script(provider, *[tool({"source": vector_add("pass 1"), "rationale": "r"}) for _ in range(2)])
    p = proposer_for(key, loopback, cache_ttl="long")
    result = p.propose(long_static_short_alone(lines))
    assert result.errors == [] and loopback.rejected == []
    plan = result.calls[0].plan["cache"]
    assert plan["on"] is True and plan["static_on"] is False and plan["static_tokens_estimate"] < minimum
    assert "under the minimum" in plan["reason"] and plan["static_ttl"] is None
    body = loopback.requests(provider)[0].body
    if provider == "anthropic":
        static_block, shared_block = body["messages"][0]["content"][:2]
        assert "cache_control" not in static_block and shared_block["cache_control"] == {"type": "ephemeral"}
    else:
        static_part, shared_part = body["input"][0]["content"][:2]
        assert "prompt_cache_breakpoint" not in static_part
        assert shared_part["prompt_cache_breakpoint"] == {"mode": "explicit"}
    # the shared prefix, which clears the minimum, is still read by the second proposal
    assert result.calls[1].cache_read_tokens > 0
