"""kernel_forge.proposers.openai_chat: Chat Completions' wire format (what an answer says)."""
from __future__ import annotations

from types import SimpleNamespace as NS

from kernel_forge.proposers.openai_chat import ChatApi

API = ChatApi(p=None)


def completion(finish: str, content: str | None = None, refusal: str | None = None, tool_calls=None):
    message = NS(content=content, refusal=refusal, tool_calls=tool_calls)
    return NS(choices=[NS(finish_reason=finish, message=message)])


def test_a_length_stop_is_a_cut_off_and_a_filter_or_a_bare_refusal_is_not_answered():
    assert API.truncated(completion("length", "partial")) and not API.truncated(completion("stop", "x"))
    assert "content filter" in API.refusal(completion("content_filter"))
    assert API.refusal(completion("stop", refusal="I can't")) == "the model declined to answer: I can't"
    assert API.refusal(completion("stop", content="kernel", refusal="note")) is None
    assert API.stop_text(completion("length")) == "finish_reason=length" and API.text(completion("stop")) == ""


def test_the_submit_kernel_call_is_chosen_over_other_tool_calls():
    other = NS(function=NS(name="search", arguments="{}"))
    submit = NS(function=NS(name="submit_kernel", arguments='{"source": "s"}'))
    assert API.function_call(completion("tool_calls", tool_calls=[other, submit])) is submit
    assert API.arguments(submit) == '{"source": "s"}'
