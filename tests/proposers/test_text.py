"""kernel_forge.proposers.text: a text answer from a model (ask_text), from recorded exchanges (ReplayText),
and the text of a recorded response body of either provider."""
from __future__ import annotations

import json

import pytest

from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.proposers.base import ModelCall
from kernel_forge.proposers.provider import TextReply
from kernel_forge.proposers.text import ReplayText, ask_text, record, response_text


def test_the_text_of_a_recorded_response_is_read_from_each_provider_s_shape():
    anthropic = {"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "one"},
                             {"type": "text", "text": "two "}]}
    responses = {"output": [{"type": "reasoning", "summary": []},
                            {"type": "message", "content": [{"type": "output_text", "text": " three"},
                                                            {"type": "refusal", "refusal": "no"}]}]}
    chat = {"choices": [{"message": {"content": None}}, {"message": {"content": "  four\n"}}]}
    chat_parts = {"choices": [{"message": {"content": [{"type": "text", "text": "five"}, {"text": "six"}]}}]}
    assert response_text(anthropic) == "one\ntwo"                    # thinking left out, stripped
    assert response_text(responses) == "three"                        # only output_text parts
    assert response_text(chat) == "four"                              # the first choice with content
    assert response_text(chat_parts) == "five\nsix"
    assert response_text(None) == "" and response_text({"choices": []}) == "" and response_text([1]) == ""


class Asked:
    """A model proposer's ``ask`` that returns one scripted reply."""

    provider, base_url = "openai", None

    def __init__(self, reply: TextReply):
        self.reply, self.asked = reply, []

    def ask(self, system, messages, what="a text answer"):
        self.asked.append((system, messages, what))
        return self.reply


def test_ask_text_returns_the_answer_and_its_calls_and_names_the_role_it_asked_for():
    call = ModelCall(provider="openai", model="m", request={}, response=None)
    model = Asked(TextReply("the manifest", [call]))
    answer = ask_text(model, "sys", [{"role": "user", "content": "hi"}], role="manifest")
    assert (answer.text, answer.calls, answer.replayed_from) == ("the manifest", [call], None)
    assert model.asked == [("sys", [{"role": "user", "content": "hi"}], "the manifest answer")]


def test_ask_text_turns_a_refused_or_cut_off_answer_into_an_input_error_and_a_failed_exchange_into_an_environment_problem():
    with pytest.raises(InputError) as info:
        ask_text(Asked(TextReply("", error="budget: too dear", budget_exhausted=True)), "s", [])
    assert info.value.message == "budget: too dear" and "raise --budget-usd" in info.value.hint
    with pytest.raises(InputError) as info:
        ask_text(Asked(TextReply("", error="cut off again", truncated=True)), "s", [])
    assert info.value.message == "cut off again" and "raise --max-output-tokens" in info.value.hint
    with pytest.raises(EnvironmentProblem) as info:
        ask_text(Asked(TextReply("", error="HTTP 401: bad key")), "s", [])
    assert info.value.message == "HTTP 401: bad key (the openai API)"
    local = Asked(TextReply("", error="connection failed"))
    local.base_url = "http://127.0.0.1:8000/v1"
    with pytest.raises(EnvironmentProblem, match=r"connection failed \(http://127.0.0.1:8000/v1\)"):
        ask_text(local, "s", [])


def _records(folder, *recs):
    folder.mkdir()
    for i, rec in enumerate(recs, 1):
        (folder / f"model-{i:03d}.json").write_text(json.dumps(rec))
    return folder


def test_a_replay_hands_out_each_role_s_records_in_file_order_at_no_cost(tmp_path):
    folder = _records(tmp_path / "ex",
                      {"role": "manifest", "provider": "anthropic", "model": "claude-x", "cost_usd": 0.4,
                       "seconds": 9.0, "input_tokens": 120, "response": {"content": [{"type": "text", "text": "M1"}]}},
                      {"role": "reference", "text": "R1"},
                      {"crosscheck": "not an answer"},                             # no role: skipped
                      {"role": "manifest", "text": "M2"})
    replay = ReplayText(folder)
    assert replay.name == "anthropic:claude-x"                                # from the first record
    first = replay.ask("manifest", "s", [{"role": "user", "content": "q"}])
    assert first.text == "M1" and first.replayed_from == str(folder / "model-001.json")
    (call,) = first.calls
    assert (call.provider, call.model, call.input_tokens, call.cost_usd, call.seconds) == \
        ("anthropic", "claude-x", 120, 0.0, 0.0)
    assert replay.ask("reference", "s", []).text == "R1"
    second = replay.ask("manifest", "s", [{"role": "user", "content": "q2"}])
    assert second.text == "M2" and second.calls[0].request == {"messages": [{"role": "user", "content": "q2"}]}
    with pytest.raises(InputError, match="no \\(further\\) recorded answer for the manifest call"):
        replay.ask("manifest", "s", [])


def test_a_replay_refuses_a_folder_it_cannot_use_and_answers_recorded_for_another_description(tmp_path):
    with pytest.raises(InputError, match="not a folder of recorded answers"):
        ReplayText(tmp_path / "missing")
    with pytest.raises(InputError, match="holds no recorded answers"):
        ReplayText(_records(tmp_path / "empty", {"crosscheck": 1}))
    with pytest.raises(InputError, match=r"model-001.json: \$: a record needs the \"response\" it got or its \"text\""):
        ReplayText(_records(tmp_path / "bare", {"role": "manifest"}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model-001.json").write_text("{oops")
    with pytest.raises(InputError, match="not a readable JSON record"):
        ReplayText(tmp_path / "broken")
    said = _records(tmp_path / "said", {"role": "manifest", "text": "M", "description": " y = relu(x) "})
    assert ReplayText(said, description="y = relu(x)").name == "replay"     # the same, but for whitespace
    with pytest.raises(InputError, match=r"\$\.description: these answers were recorded for another description: ' y = relu\(x\) '"):
        ReplayText(said, description="y = gelu(x)")


def test_a_record_is_the_call_with_what_the_describe_step_adds():
    call = ModelCall(provider="openai", model="m", request={"k": 1}, response=None, cost_usd=0.5)
    rec = record(call, index=3, role="manifest")
    assert rec["index"] == 3 and rec["role"] == "manifest" and rec["cost_usd"] == 0.5 and rec["request"] == {"k": 1}
