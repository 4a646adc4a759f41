"""OpenAI-compatible servers (vLLM, llama.cpp, Ollama, SGLang ...) through Chat Completions on the
wire (:class:`ChatApi`): the request body (a system and a user message, the server's output-limit
field, ``reasoning_effort`` only when asked), the streamed chunks assembled by the SDK's
``ChatCompletionStreamState``, and what an answer says: its text, its tool call, whether it was cut
off or withheld, and the repair turn."""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.retry import MidStreamError
from kernel_forge.proposers.proposal_schema import TOOL_NAME
from kernel_forge.proposers.transport import ASSEMBLY_ERRORS, EmptyStream, StreamAssemblyError
from kernel_forge.proposers.usage import Progress


def _message(response: Any):
    """(the first choice, its message) of a chat completion, or (None, None)."""
    choices = getattr(response, "choices", None) or []
    return (choices[0], getattr(choices[0], "message", None)) if choices else (None, None)


class ChatApi:
    """Chat Completions for OpenAI proposer ``p`` (its client, settings and tool)."""

    #: the usage's fields: all input tokens, their details, output tokens' details, output tokens
    usage_fields = ("prompt_tokens", "prompt_tokens_details", "completion_tokens_details", "completion_tokens")

    def __init__(self, p):
        self.p = p

    def body(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        messages: list[dict] = []
        system = self.p.system_text(request.system)
        if system:
            messages.append({"role": "system", "content": system})
        # the shared parts first, in the same message: servers cache the longest common prefix
        text = "\n\n".join(p for p in (plan.static, plan.common, plan.rest(index)) if p)
        messages.append({"role": "user", "content": text})
        body: dict[str, Any] = {"model": self.p.model, "messages": messages, self.p.max_tokens_field: self.p.max_tokens}
        if self.p.answer_format == "tool":
            body["tools"] = [copy.deepcopy(self.p._tool)]
            body["tool_choice"] = ({"type": "function", "function": {"name": TOOL_NAME}}
                                   if self.p.caps.forced_tool_ok(self.p.thinking_on) else "auto")
        if self.p.effort is not None:
            body["reasoning_effort"] = self.p.effort
        if self.p.send_temperature:
            body["temperature"] = self.p.temperature
        if self.p.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body


    def send(self, body: dict, on_start: Callable[[], None], progress: Progress) -> Any:
        kwargs = copy.deepcopy(body)
        if not kwargs.get("stream"):
            response = self.p._client.chat.completions.create(**kwargs, timeout=self.p._request_timeout(body))
            on_start()
            return response
        from openai.lib.streaming.chat import ChatCompletionStreamState

        state = ChatCompletionStreamState()
        chunks = 0
        stream = self.p._client.chat.completions.create(**kwargs)
        progress.started = True               # HTTP 200: from here on the input is billed
        finished = False
        try:
            for chunk in stream:
                try:
                    state.handle_chunk(chunk)
                except ASSEMBLY_ERRORS as exc:
                    raise StreamAssemblyError(f"chunk {chunks + 1}: {type(exc).__name__}: {exc}") from exc
                chunks += 1
                on_start()
                for choice in getattr(chunk, "choices", None) or []:
                    finished = finished or getattr(choice, "finish_reason", None) is not None
                    delta = getattr(choice, "delta", None)
                    progress.chars += len(getattr(delta, "content", None) or "") if delta is not None else 0
                    for call in (getattr(delta, "tool_calls", None) or []) if delta is not None else []:
                        fn = getattr(call, "function", None)
                        progress.chars += len(getattr(fn, "arguments", None) or "") if fn is not None else 0
                if getattr(chunk, "usage", None) is not None:
                    progress.usage = self.p._usage(chunk)
        finally:
            stream.close()
        if not chunks:
            raise EmptyStream("the streamed answer held no chunk")
        if not finished:                      # no finish_reason came: the connection closed mid-answer
            raise MidStreamError(f"the stream ended after {chunks} chunk(s) without a finish_reason (the "
                                 "connection dropped mid-answer)", transient=True, dropped=True)
        # the snapshot, not get_final_completion(): that one raises on finish_reason "length",
        # which is handled here as a truncated answer
        return state.current_completion_snapshot


    def truncated(self, response: Any) -> bool:
        choice, _ = _message(response)
        return getattr(choice, "finish_reason", None) == "length"

    def refusal(self, response: Any) -> str | None:
        """A content filter, or an answer that is only a refusal."""
        choice, message = _message(response)
        if getattr(choice, "finish_reason", None) == "content_filter":
            return "the answer was withheld by a content filter (finish_reason=content_filter)"
        refusal = getattr(message, "refusal", None) if message is not None else None
        if refusal and not (getattr(message, "content", None) or getattr(message, "tool_calls", None)):
            return f"the model declined to answer: {refusal}"
        return None

    def stop_text(self, response: Any) -> str:
        choice, _ = _message(response)
        return f"finish_reason={getattr(choice, 'finish_reason', None)}"

    def text(self, response: Any) -> str:
        _, message = _message(response)
        return (getattr(message, "content", None) or "") if message is not None else ""

    def function_call(self, response: Any):
        _, message = _message(response)
        calls = [c for c in (getattr(message, "tool_calls", None) or []) if getattr(c, "function", None) is not None]
        named = [c for c in calls if getattr(c.function, "name", None) == TOOL_NAME]
        return (named or calls or [None])[0]

    @staticmethod
    def arguments(call: Any) -> Any:
        return call.function.arguments

    def repair(self, body: dict, response: Any, problem: str) -> dict:
        _, message = _message(response)
        call = self.function_call(response) if message is not None else None
        text = self.p.repair_text(problem)
        new = copy.deepcopy(body)
        content = getattr(message, "content", None) if message is not None else None
        if call is not None:
            call_id = getattr(call, "id", None) or "call_0"
            raw = call.function.arguments
            arguments = raw if isinstance(raw, str) else json.dumps(raw)
            new["messages"].append({
                "role": "assistant",
                "content": content,
                "tool_calls": [{"id": call_id, "type": "function",
                                "function": {"name": call.function.name or TOOL_NAME, "arguments": arguments}}],
            })
            new["messages"].append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            new["messages"].append({"role": "assistant", "content": content or ""})
            new["messages"].append({"role": "user", "content": text})
        return new


    def add_user_text(self, body: dict, text: str) -> dict:
        new = copy.deepcopy(body)
        new["messages"].append({"role": "user", "content": text})
        return new

    def conversation_body(self, new: dict, system: str, messages: list[dict]) -> dict:
        new["messages"] = ([{"role": "system", "content": system}] if system else []) + [
            {"role": m["role"], "content": m["content"]} for m in messages]
        return new
