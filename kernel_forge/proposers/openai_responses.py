"""The OpenAI Responses API on the wire (:class:`ResponsesApi`): the request body (``instructions``,
one user message of input-text parts, ``max_output_tokens``, ``reasoning``, ``store: false``, the
prompt-cache key), the streamed answer (its terminal ``response.completed`` / ``response.incomplete``
event carries the whole response), and what an answer says: its text, its function call, whether
it was cut off or declined, and the repair turn that replays its output items."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.retry import TRANSIENT_ERRORS, MidStreamError
from kernel_forge.proposers.proposal_schema import TOOL_NAME
from kernel_forge.proposers.transport import EmptyStream
from kernel_forge.proposers.usage import Progress

TERMINAL_EVENTS = ("response.completed", "response.incomplete")


def input_parts(cache: str, plan: CachePlan, index: int) -> list[dict]:
    """The user message's text parts: the run's part, the shared sections, the proposal's own.
    On a model that caches at explicit breakpoints (table ``cache: breakpoints``, gpt-5.6 and
    later: the SDK's ``PromptCacheOptions`` / ``PromptCacheBreakpoint`` docs), the run's part
    ends at one (with the long lifetime when asked, and only where it clears the minimum on its
    own) and the shared sections at another (the default 30 minutes: only the run's part is
    worth the long lifetime's dearer write), so the other proposals of a fan-out, and the next
    iteration, match those prefixes exactly; the implicit breakpoint stays on."""
    marks = cache == "breakpoints" and plan.on
    out = []
    for text, mark, ttl in ((plan.static, plan.static_on, plan.static_ttl), (plan.common, True, None),
                            (plan.rest(index), False, None)):
        if not text:
            continue
        part: dict[str, Any] = {"type": "input_text", "text": text}
        if marks and mark:
            part["prompt_cache_breakpoint"] = {"mode": "explicit", **({"ttl": ttl} if ttl else {})}
        out.append(part)
    return out


class ResponsesApi:
    """The Responses API of OpenAI proposer ``p`` (its client, settings and tool)."""

    limit_field = "max_output_tokens"
    #: the usage's fields: all input tokens, their details, output tokens' details, output tokens
    usage_fields = ("input_tokens", "input_tokens_details", "output_tokens_details", "output_tokens")

    def __init__(self, p):
        self.p = p

    def body(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        body: dict[str, Any] = {
            "model": self.p.model,
            "input": [{"role": "user", "content": self.p._input_parts(plan, index)}],
            "max_output_tokens": self.p.max_tokens,
            "store": False,
        }
        system = self.p.system_text(request.system)
        if system:
            body["instructions"] = system
        if self.p.effort is not None:
            body["reasoning"] = {"effort": self.p.effort}
            if self.p.effort != "none":
                # the reasoning's summary comes back readable (in the evidence; the 120 s timeout
                # counts silence, and summary events break a long silence while the model thinks)
                body["reasoning"]["summary"] = "auto"
                body["include"] = ["reasoning.encrypted_content"]
        if self.p.caps.cache in ("automatic", "breakpoints") and self.p.prompt_cache:
            body["prompt_cache_key"] = plan.key
            if plan.static_ttl and self.p.caps.cache != "breakpoints":   # there: on the run's part's breakpoint only
                body["prompt_cache_options"] = {"ttl": plan.static_ttl}
        if self.p.answer_format == "tool":
            forced = self.p.caps.forced_tool_ok(self.p.thinking_on)
            body["tools"] = [copy.deepcopy(self.p._tool)]
            body["tool_choice"] = {"type": "function", "name": TOOL_NAME} if forced else "auto"
            body["parallel_tool_calls"] = False
        if self.p.send_temperature:
            body["temperature"] = self.p.temperature
        if self.p.stream:
            body["stream"] = True
        return body


    def send(self, body: dict, on_start: Callable[[], None], progress: Progress) -> Any:
        kwargs = copy.deepcopy(body)
        if not kwargs.get("stream"):
            kwargs.pop("stream", None)
            response = self.p._client.responses.create(**kwargs, timeout=self.p._request_timeout(body))
            on_start()
            if getattr(response, "status", None) == "failed":
                progress.started = True           # a whole answer that failed: billed what it reports
                if getattr(response, "usage", None) is not None:
                    progress.usage = self.p._usage(response)
                raise _failed(response)
            return response
        final, events = None, 0
        stream = self.p._client.responses.create(**kwargs)
        progress.started = True               # HTTP 200: from here on the input is billed
        try:
            for event in stream:
                events += 1
                on_start()
                kind = getattr(event, "type", "")
                if kind in TERMINAL_EVENTS:
                    final = getattr(event, "response", None)
                elif kind == "response.failed":           # usage so far comes with it
                    failed = getattr(event, "response", None)
                    if getattr(failed, "usage", None) is not None:
                        progress.usage = self.p._usage(failed)
                    raise _failed(failed)
                elif kind == "error":
                    code = (getattr(event, "code", None) or "").lower()
                    raise MidStreamError(f"error event in the stream: {code or 'error'}: "
                                         f"{getattr(event, 'message', '')}",
                                         transient=code in TRANSIENT_ERRORS or not code,
                                         body={"error": {"code": code or None,
                                                         "message": getattr(event, "message", None)}})
                elif kind.endswith(".delta"):
                    progress.chars += len(getattr(event, "delta", None) or "") \
                        if isinstance(getattr(event, "delta", None), str) else 0
        finally:
            stream.close()
        if not events:
            raise EmptyStream("the streamed answer held no event")
        if final is None:
            raise MidStreamError(f"the stream ended after {events} event(s) without response.completed or "
                                 "response.incomplete (the connection dropped mid-answer)", transient=True,
                                 dropped=True)
        return final


    def truncated(self, response: Any) -> bool:
        details = getattr(response, "incomplete_details", None)
        return (getattr(response, "status", None) == "incomplete"
                and getattr(details, "reason", None) == "max_output_tokens")

    def refusal(self, response: Any) -> str | None:
        """An incomplete answer for any reason but its output limit (which the truncation retry
        handles), or an answer that is a refusal."""
        details = getattr(response, "incomplete_details", None)
        reason = getattr(details, "reason", None)
        if getattr(response, "status", None) == "incomplete" and reason != "max_output_tokens":
            return f"the answer is incomplete: {reason or 'no reason given'} (status=incomplete)"
        for item in getattr(response, "output", None) or []:
            for part in getattr(item, "content", None) or [] if getattr(item, "type", None) == "message" else []:
                if getattr(part, "type", None) == "refusal":
                    return f"the model declined to answer: {getattr(part, 'refusal', '')}"
        return None

    def stop_text(self, response: Any) -> str:
        return f"status={getattr(response, 'status', None)}"

    def text(self, response: Any) -> str:
        out = []
        for item in getattr(response, "output", None) or []:
            if getattr(item, "type", None) == "message":
                for part in getattr(item, "content", None) or []:
                    if getattr(part, "type", None) == "output_text":
                        out.append(getattr(part, "text", "") or "")
        return "\n".join(out)

    def function_call(self, response: Any):
        calls = [i for i in (getattr(response, "output", None) or []) if getattr(i, "type", None) == "function_call"]
        named = [c for c in calls if getattr(c, "name", None) == TOOL_NAME]
        return (named or calls or [None])[0]

    @staticmethod
    def arguments(call: Any) -> Any:
        return call.arguments

    def repair(self, body: dict, response: Any, problem: str) -> dict:
        new = copy.deepcopy(body)
        text = self.p.repair_text(problem)
        call_id = None
        for item in getattr(response, "output", None) or []:
            kind = getattr(item, "type", None)
            if kind == "reasoning":
                # with store: false the reasoning travels in its encrypted content
                data = {"type": "reasoning", "id": getattr(item, "id", None),
                        "summary": [{"type": "summary_text", "text": getattr(s, "text", "")}
                                    for s in (getattr(item, "summary", None) or [])]}
                if getattr(item, "encrypted_content", None):
                    data["encrypted_content"] = item.encrypted_content
                new["input"].append(data)
            elif kind == "message":
                # the assistant's output message as it came (the SDK's ResponseOutputMessageParam): its id,
                # status and phase kept -- the SDK says to resend phase on every assistant message for newer
                # models; without an id (a server that sends none), its text as an EasyInputMessageParam
                parts = [getattr(p, "text", "") or "" for p in (getattr(item, "content", None) or [])
                         if getattr(p, "type", None) == "output_text"]
                if not parts:
                    continue
                phase = getattr(item, "phase", None)
                if getattr(item, "id", None):
                    message = {"type": "message", "id": item.id, "role": "assistant",
                               "status": getattr(item, "status", None) or "completed",
                               "content": [{"type": "output_text", "text": t, "annotations": []} for t in parts]}
                else:
                    message = {"role": "assistant", "content": "\n".join(parts)}
                if phase:
                    message["phase"] = phase
                new["input"].append(message)
            elif kind == "function_call" and call_id is None:
                call_id = getattr(item, "call_id", None) or "call_0"
                new["input"].append({"type": "function_call", "call_id": call_id,
                                     "name": getattr(item, "name", None) or TOOL_NAME,
                                     "arguments": getattr(item, "arguments", "") or ""})
        if call_id is not None:
            new["input"].append({"type": "function_call_output", "call_id": call_id, "output": text})
        else:
            new["input"].append({"role": "user", "content": [{"type": "input_text", "text": text}]})
        return new


    def add_user_text(self, body: dict, text: str) -> dict:
        new = copy.deepcopy(body)
        new["input"].append({"role": "user", "content": [{"type": "input_text", "text": text}]})
        return new

    def conversation_body(self, new: dict, system: str, messages: list[dict]) -> dict:
        if system:
            new["instructions"] = system
        new["input"] = [{"role": m["role"], "content": [{"type": "input_text", "text": m["content"]}]}
                        if m["role"] == "user" else {"role": m["role"], "content": m["content"]}
                        for m in messages]
        return new


def _failed(response: Any) -> MidStreamError:
    """A Responses answer that ended ``failed`` (a ``response.failed`` event, or a whole answer with
    that status): retried where its error code is one that passes (``server_error``,
    ``rate_limit_exceeded`` ...), recorded as failed otherwise."""
    error = getattr(response, "error", None)
    code = (getattr(error, "code", None) or "").lower()
    message = getattr(error, "message", None) or ""
    return MidStreamError(f"the response failed: {code or 'no error code'}: {message}",
                          transient=code in TRANSIENT_ERRORS or not code,
                          body={"error": {"code": code or None, "message": message}})
