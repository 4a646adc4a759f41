"""Every model of the capability table, by name, through the real SDKs and the loopback: the
thinking and effort each request carries, written out here per model (not derived from
kernel_forge/data/models.json), and every body checked against the installed SDK's request types
(tests/support/sdk_types.py, which the loopback applies to every request).  A table entry that makes kforge
send a field or value the SDK does not define fails here, whatever the table says: the last tests
plant such entries in a copy of the table and show it."""
from __future__ import annotations

import copy

import pytest

from kernel_forge.proposers import capabilities
from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.budget import estimate_tokens

from tests.support.fakes import vector_add
from tests.support.loopback import Loopback, tool
from tests.support.sdk_types import check_request
from tests.support.table_proposers import proposer_for, spec_of

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

ADAPTIVE = {"type": "adaptive"}
BUDGET = {"type": "enabled", "budget_tokens": 16000}
OFF = {"type": "disabled"}
ENC = ["reasoning.encrypted_content"]

#: per model, what kforge sends by default (thinking on where the model has it, effort high), when
#: effort max is asked, and when thinking is asked off (Anthropic thinking="disabled", OpenAI
#: reasoning effort "none"): Anthropic (thinking, output_config.effort, max_tokens); OpenAI
#: Responses (reasoning.effort, include, max_output_tokens); a local server (reasoning_effort, max_tokens)
EXPECTED = {
    'anthropic:claude-fable-5': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'adaptive'}, 'high', 32000)],
    'anthropic:claude-fable-5-1': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'adaptive'}, 'high', 32000)],
    'anthropic:claude-fable-5-2': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'adaptive'}, 'high', 32000)],
    'anthropic:claude-haiku-4-5': [({'type': 'enabled', 'budget_tokens': 16000}, None, 32000), ({'type': 'enabled', 'budget_tokens': 16000}, None, 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-haiku-5-5': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-mythos-5': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'adaptive'}, 'high', 32000)],
    'anthropic:claude-mythos-5-1': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'adaptive'}, 'high', 32000)],
    'anthropic:claude-mythos-5-2': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'adaptive'}, 'high', 32000)],
    'anthropic:claude-opus-4-5': [({'type': 'enabled', 'budget_tokens': 16000}, 'high', 32000), ({'type': 'enabled', 'budget_tokens': 16000}, 'high', 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-opus-4-6': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-opus-4-7': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-opus-4-8': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-opus-5': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-opus-5-5': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'adaptive'}, 'high', 32000)],
    'anthropic:claude-sonnet-4-6': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-sonnet-5': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'disabled'}, None, 16000)],
    'anthropic:claude-sonnet-5-5': [({'type': 'adaptive'}, 'high', 32000), ({'type': 'adaptive'}, 'max', 32000), ({'type': 'between_tools'}, None, 16000)],
    'local:llama.cpp': [(None, 'window'), ('max', 'window'), ('none', 'window')],
    'local:ollama': [(None, 'window'), ('max', 'window'), ('none', 'window')],
    'local:sglang': [(None, 8192), ('max', 8192), ('none', 8192)],
    'local:vllm': [(None, 8192), ('max', 8192), ('none', 8192)],
    'openai:gpt-4.1': [(None, None, 16000), (None, None, 16000), (None, None, 16000)],
    'openai:gpt-5': [('high', ['reasoning.encrypted_content'], 32000), ('high', ['reasoning.encrypted_content'], 32000), ('minimal', ['reasoning.encrypted_content'], 32000)],
    'openai:gpt-5-mini': [('high', ['reasoning.encrypted_content'], 32000), ('high', ['reasoning.encrypted_content'], 32000), ('minimal', ['reasoning.encrypted_content'], 32000)],
    'openai:gpt-5.4': [('high', ['reasoning.encrypted_content'], 32000), ('xhigh', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-5.4-mini': [('high', ['reasoning.encrypted_content'], 32000), ('xhigh', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-5.5': [('high', ['reasoning.encrypted_content'], 32000), ('xhigh', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-5.6-luna': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-5.6-sol': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-5.6-terra': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-6-astra': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('low', ['reasoning.encrypted_content'], 32000)],
    'openai:gpt-6-luna': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-6-sol': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-6.1-sol': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('low', ['reasoning.encrypted_content'], 32000)],
    'openai:gpt-6.1-terra': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('none', None, 16000)],
    'openai:gpt-6.2-astra': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('low', ['reasoning.encrypted_content'], 32000)],
    'openai:gpt-6.2-sol': [('high', ['reasoning.encrypted_content'], 32000), ('max', ['reasoning.encrypted_content'], 32000), ('low', ['reasoning.encrypted_content'], 32000)],
}

#: what a request of each kind is asked with (the three columns of EXPECTED)
ASKS = ({}, {"reasoning_effort": "max"}, "off")


def summary(provider: str, body: dict) -> tuple:
    if provider == "anthropic":
        return (body.get("thinking"), (body.get("output_config") or {}).get("effort"), body["max_tokens"])
    if "input" in body:
        return ((body.get("reasoning") or {}).get("effort"), body.get("include"), body["max_output_tokens"])
    limit = body.get("max_tokens")
    # an 8,192-token window with 8,192 output tokens asked: the limit is lowered to the room the prompt leaves
    return (body.get("reasoning_effort"), "window" if limit == 8192 - estimate_tokens(body) else limit)


def route_of(key: str, body: dict) -> str:
    return "anthropic" if key.startswith("anthropic:") else ("responses" if "input" in body else "chat")


def bodies_of(key: str, server: Loopback) -> list[dict]:
    """The first request body for ``key`` under each of :data:`ASKS` (answered by the loopback)."""
    provider = spec_of(key)[0]
    out = []
    for ask in ASKS:
        kw = dict(ask) if ask != "off" else ({"thinking": "disabled"} if provider == "anthropic"
                                               else {"reasoning_effort": "none"})
        server.script(provider, tool({"source": vector_add("pass 1"), "rationale": "r"}))
        before = len(server.received)
        proposer_for(key, server, **kw).propose(ProposalRequest(system="s", prompt="p"))
        out.append(server.received[before].body)
    return out


@pytest.fixture
def server():
    s = Loopback(start_delay=0).start()
    try:
        yield s
    finally:
        s.stop()


def test_every_model_of_the_table_has_its_expected_bodies_here():
    assert sorted(EXPECTED) == sorted(capabilities.entries())


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_the_thinking_and_effort_each_model_is_sent_are_the_expected_ones_and_the_sdk_allows_them(
        clean_env, server, key):
    bodies = bodies_of(key, server)
    provider = spec_of(key)[0]
    assert [summary(provider, b) for b in bodies] == EXPECTED[key]
    for body in bodies:
        assert check_request(route_of(key, body), body) == []
    assert server.invalid == [] and server.rejected == []


# -- a wrong table entry fails ------------------------------------------------------------------

@pytest.fixture
def planted(monkeypatch):
    """Plant entries in a copy of the table: ``planted(key, **fields)``; the shipped table is
    restored afterwards."""
    data = copy.deepcopy(capabilities.table())

    def plant(key: str, **fields):
        data["models"][key].update(fields)
        monkeypatch.setattr(capabilities, "_data", lambda: data)
        capabilities.table.cache_clear()
        capabilities.entries.cache_clear()

    yield plant
    monkeypatch.undo()
    capabilities.table.cache_clear()
    capabilities.entries.cache_clear()


@pytest.mark.parametrize("key, fields, words", [
    ("openai:gpt-6.2-sol", {"effort": ["ultra"]}, "$.reasoning.effort: 'ultra' is not one of"),
    ("anthropic:claude-opus-5-5", {"effort": ["extreme"]}, "$.output_config.effort: 'extreme' is not one of"),
    ("anthropic:claude-opus-5", {"thinking_off": "paused"}, "'paused' is not one of"),
    ("local:vllm", {"effort": ["turbo"]}, "$.reasoning_effort: 'turbo' is not one of"),
])
def test_a_wrong_field_or_value_planted_in_a_copy_of_the_table_fails_the_model_s_test(
        clean_env, server, planted, key, fields, words):
    planted(key, **fields)
    assert capabilities.entries()[key].effort == tuple(fields.get("effort", capabilities.entries()[key].effort))
    bodies = bodies_of(key, server)
    # the loopback answered the wrong request with a 400 naming the SDK's rule ...
    assert server.invalid and any(words in r.message for r in server.invalid), [r.message for r in server.invalid]
    # ... and the per-model test above fails on it
    with pytest.raises(AssertionError):
        provider = spec_of(key)[0]
        assert [summary(provider, b) for b in bodies] == EXPECTED[key]
        for body in bodies:
            assert check_request(route_of(key, body), body) == []
