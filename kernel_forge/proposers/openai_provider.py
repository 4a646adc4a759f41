"""Candidates from OpenAI models through the Responses API, and from OpenAI-compatible servers
(vLLM, llama.cpp, Ollama, SGLang ...) through Chat Completions, with the official ``openai`` SDK.

Which API a model gets comes from its capability entry (:mod:`.capabilities`): OpenAI's models
(listed, or unknown on OpenAI's own endpoint) use ``client.responses.create``; a model behind a
``--base-url`` that the table does not list uses ``client.chat.completions.create``.

Responses API request: ``instructions`` (the system prompt), ``input`` (one user message whose
text parts are the run's static prefix, the sections every proposal of the request shares, and
the proposal's own part: the prefix OpenAI caches), ``max_output_tokens`` (thinking plus a kernel:
32,000 where the model reasons, within its maximum), ``reasoning.effort`` (default ``high``,
stepped down to the highest level the model takes; some models otherwise default to ``none``),
``store: false`` with ``include: ["reasoning.encrypted_content"]``, and ``prompt_cache_key`` (the
same for every request of the run, so they reach the same cache); ``prompt_cache_options.ttl``
12 h on models that have it when an iteration takes longer than 30 minutes.  GPT-5.6 and later
cache exactly at ``prompt_cache_breakpoint``s (the openai SDK 3.60 docstrings of
``PromptCacheOptions`` and ``PromptCacheBreakpoint``): there the run's part and the shared sections
each end at an explicit breakpoint (:meth:`OpenAIProposer._input_parts`).  A temperature is
sent only where the model takes one (with reasoning off).

``reasoning.summary: "auto"`` is asked wherever reasoning is on.  The repair turn keeps the
reasoning: the answer's output items -- reasoning items with their encrypted content, as ``store:
false`` requires, and the output message with its ``id``, ``status`` and ``phase`` (the SDK says to
resend ``phase`` on assistant messages for newer models) -- go back in ``input``, then a user
message (or a ``function_call_output``) quoting the problem.  This is the stateless form of what
``previous_response_id`` does (which needs ``store: true``: OpenAI then keeps the answers).

Usage (Responses): ``input_tokens`` (all of them), ``input_tokens_details.cached_tokens`` and
``cache_write_tokens`` (with ``cache_write_tokens_details.ttl_30m_tokens`` / ``ttl_12h_tokens``),
``output_tokens`` and ``output_tokens_details.reasoning_tokens``.  Chat Completions: ``prompt_tokens``,
``prompt_tokens_details.cached_tokens`` / ``cache_write_tokens``, ``completion_tokens`` and
``completion_tokens_details.reasoning_tokens`` -- local servers often report only the totals.

Answers are streamed by default (the Responses stream's final ``response.completed`` /
``response.incomplete`` event carries the whole response; Chat Completions chunks are assembled
by the SDK's ``ChatCompletionStreamState``).  ``openai`` is imported only when a proposer is built.
"""
from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

from kernel_forge.common.errors import InputError
from kernel_forge.common.reads import nesting_problem
from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.provider import DEFAULT_EFFORT, ModelProposer
from kernel_forge.proposers.relaxation import WITHOUT_TEMPERATURE, Relaxation
from kernel_forge.proposers.transport import ASSEMBLY_ERRORS, StreamAssemblyError, as_count, import_sdk
from kernel_forge.proposers.usage import Progress, Usage
from kernel_forge.proposers.options import ProviderOptions, choices
from kernel_forge.proposers.retry import TRANSIENT_ERRORS, MidStreamError
from kernel_forge.proposers.schema import TOOL_DESCRIPTION, TOOL_NAME, proposal_schema

#: the openai SDK releases kforge is tested with (pyproject.toml says the same)
SDK_REQUIREMENT = "openai>=3.60,<4"
LIMIT_FIELDS = choices("max_tokens_field")
EFFORTS = choices("reasoning_effort")
_ORDER = EFFORTS
TERMINAL_EVENTS = ("response.completed", "response.incomplete")


class EmptyStream(Exception):
    """The server closed a streamed answer without sending any chunk."""


class OpenAIProposer(ModelProposer):
    provider = "openai"
    thinking_word = "reasoning"

    def __init__(self, model: str, options: ProviderOptions | None = None, **wiring: Any):
        """``model`` asked as ``options`` say (``wiring``: as :class:`ModelProposer` takes it)."""
        options = options or ProviderOptions()
        effort, max_tokens_field = options.reasoning_effort, options.max_tokens_field
        if effort is not None and effort not in EFFORTS:
            raise InputError(f"openai: reasoning_effort must be one of {', '.join(EFFORTS)}, "
                             f"got {effort!r}")
        if max_tokens_field is not None and max_tokens_field not in LIMIT_FIELDS:
            raise InputError(f"openai: max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                             f"got {max_tokens_field!r}")
        self._field_override = max_tokens_field
        super().__init__(model, options, **wiring)
        self.api = self.caps.api if self.caps.api in ("responses", "chat") else "chat"
        if self.api == "responses":
            self.max_tokens_field = "max_output_tokens"
        else:
            self.max_tokens_field = max_tokens_field or (
                self.caps.limit_field if self.caps.limit_field in LIMIT_FIELDS else "max_tokens")
        self._sdk = import_sdk("openai", SDK_REQUIREMENT)
        self._sdk_error = self._sdk.OpenAIError
        key = self._api_key(wiring.get("api_key"), "OPENAI_API_KEY",
                            missing="no OpenAI API key: set OPENAI_API_KEY or pass api_key",
                            hint="export OPENAI_API_KEY=sk-...  (a local OpenAI-compatible server given "
                                 "with --base-url needs no key)")
        self._client = self._sdk.OpenAI(api_key=key, base_url=self.base_url, timeout=self._timeout(),
                                        max_retries=0)
        schema = proposal_schema()
        self._tool = ({"type": "function", "name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                       "parameters": schema, "strict": False} if self.api == "responses" else
                      {"type": "function", "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                                                        "parameters": schema, "strict": False}})

    # -- what the table makes of the settings ------------------------------------------------
    def _resolve(self, max_tokens: int | None) -> None:
        caps = self.caps
        wanted = self.reasoning_effort
        if caps.effort:
            if wanted is None:
                wanted = DEFAULT_EFFORT                 # reasoning on: some models default to none
            self.effort = caps.best_effort(wanted)
            if self.reasoning_effort and self.effort != self.reasoning_effort:
                self.adjustments.append(f"reasoning effort {self.reasoning_effort!r} asked; {caps.key} takes "
                                        f"{', '.join(caps.effort)}: {self.effort!r} sent")
        elif caps.api == "chat":
            self.effort = wanted          # a server gets reasoning_effort only when asked (it may pass it on)
        else:
            self.effort = None
            if wanted:
                self.adjustments.append(f"{caps.key} is not a reasoning model: no reasoning effort sent")
        self.thinking_on = self.effort not in (None, "none")
        limit = int(max_tokens) if max_tokens is not None else caps.default_output(self.thinking_on)
        self.max_tokens = min(limit, caps.max_output) if caps.known and caps.api != "chat" else limit
        self._resolve_temperature()

    def _limit_field(self, body: dict) -> str:
        return next((f for f in ("max_output_tokens",) + LIMIT_FIELDS if f in body), self.max_tokens_field)

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        return (self._responses_body if self.api == "responses" else self._chat_body)(request, index, plan)

    def _responses_body(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "input": [{"role": "user", "content": self._input_parts(plan, index)}],
            "max_output_tokens": self.max_tokens,
            "store": False,
        }
        system = self.system_text(request.system)
        if system:
            body["instructions"] = system
        if self.effort is not None:
            body["reasoning"] = {"effort": self.effort}
            if self.effort != "none":
                # the reasoning's summary comes back readable (in the evidence; the 120 s timeout
                # counts silence, and summary events break a long silence while the model thinks)
                body["reasoning"]["summary"] = "auto"
                body["include"] = ["reasoning.encrypted_content"]
        if self.caps.cache in ("automatic", "breakpoints") and self.prompt_cache:
            body["prompt_cache_key"] = plan.key
            if plan.static_ttl and self.caps.cache != "breakpoints":   # there: on the run's part's breakpoint only
                body["prompt_cache_options"] = {"ttl": plan.static_ttl}
        if self.answer_format == "tool":
            forced = self.caps.forced_tool_ok(self.thinking_on)
            body["tools"] = [copy.deepcopy(self._tool)]
            body["tool_choice"] = {"type": "function", "name": TOOL_NAME} if forced else "auto"
            body["parallel_tool_calls"] = False
        if self.send_temperature:
            body["temperature"] = self.temperature
        if self.stream:
            body["stream"] = True
        return body

    def _input_parts(self, plan: CachePlan, index: int) -> list[dict]:
        """The user message's text parts: the run's part, the shared sections, the proposal's own.
        On a model that caches at explicit breakpoints (table ``cache: breakpoints``, gpt-5.6 and
        later: the SDK's ``PromptCacheOptions`` / ``PromptCacheBreakpoint`` docs), the run's part
        ends at one (with the long lifetime when asked, and only where it clears the minimum on its
        own) and the shared sections at another (the default 30 minutes: only the run's part is
        worth the long lifetime's dearer write), so the other proposals of a fan-out, and the next
        iteration, match those prefixes exactly; the implicit breakpoint stays on."""
        marks = self.caps.cache == "breakpoints" and plan.on
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

    def _chat_body(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        messages: list[dict] = []
        system = self.system_text(request.system)
        if system:
            messages.append({"role": "system", "content": system})
        # the shared parts first, in the same message: servers cache the longest common prefix
        text = "\n\n".join(p for p in (plan.static, plan.common, plan.rest(index)) if p)
        messages.append({"role": "user", "content": text})
        body: dict[str, Any] = {"model": self.model, "messages": messages, self.max_tokens_field: self.max_tokens}
        if self.answer_format == "tool":
            body["tools"] = [copy.deepcopy(self._tool)]
            body["tool_choice"] = ({"type": "function", "function": {"name": TOOL_NAME}}
                                   if self.caps.forced_tool_ok(self.thinking_on) else "auto")
        if self.effort is not None:
            body["reasoning_effort"] = self.effort
        if self.send_temperature:
            body["temperature"] = self.temperature
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _send(self, body: dict, on_start: Callable[[], None], progress: Progress) -> Any:
        if self.api == "responses":
            return self._send_responses(body, on_start, progress)
        return self._send_chat(body, on_start, progress)

    def _send_responses(self, body: dict, on_start: Callable[[], None], progress: Progress) -> Any:
        kwargs = copy.deepcopy(body)
        if not kwargs.get("stream"):
            kwargs.pop("stream", None)
            response = self._client.responses.create(**kwargs, timeout=self._request_timeout(body))
            on_start()
            if getattr(response, "status", None) == "failed":
                progress.started = True           # a whole answer that failed: billed what it reports
                if getattr(response, "usage", None) is not None:
                    progress.usage = self._usage(response)
                raise _failed(response)
            return response
        final, events = None, 0
        stream = self._client.responses.create(**kwargs)
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
                        progress.usage = self._usage(failed)
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

    def _send_chat(self, body: dict, on_start: Callable[[], None], progress: Progress) -> Any:
        kwargs = copy.deepcopy(body)
        if not kwargs.get("stream"):
            response = self._client.chat.completions.create(**kwargs, timeout=self._request_timeout(body))
            on_start()
            return response
        from openai.lib.streaming.chat import ChatCompletionStreamState

        state = ChatCompletionStreamState()
        chunks = 0
        stream = self._client.chat.completions.create(**kwargs)
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
                    progress.usage = self._usage(chunk)
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

    def _classify(self, exc: BaseException):
        from kernel_forge.proposers.retry import Failure

        if isinstance(exc, EmptyStream):
            return Failure(retryable=True, description=f"empty answer: {exc}", kind="dropped")
        return super()._classify(exc)

    def _usage(self, response: Any) -> Usage:
        usage = getattr(response, "usage", None)
        if usage is None:
            return Usage(reasoning_reported=False)
        if self.api == "responses":
            total = as_count(getattr(usage, "input_tokens", 0))
            idetails = getattr(usage, "input_tokens_details", None)
            odetails = getattr(usage, "output_tokens_details", None)
            output = as_count(getattr(usage, "output_tokens", 0))
            reasoning = as_count(getattr(odetails, "reasoning_tokens", 0)) if odetails is not None else 0
        else:
            total = as_count(getattr(usage, "prompt_tokens", 0))
            idetails = getattr(usage, "prompt_tokens_details", None)
            odetails = getattr(usage, "completion_tokens_details", None)
            output = as_count(getattr(usage, "completion_tokens", 0))
            reasoning = as_count(getattr(odetails, "reasoning_tokens", 0)) if odetails is not None else 0
        cached = min(total, as_count(getattr(idetails, "cached_tokens", 0))) if idetails is not None else 0
        written = min(total - cached, as_count(getattr(idetails, "cache_write_tokens", 0))) if idetails is not None else 0
        ttl = getattr(idetails, "cache_write_tokens_details", None) if idetails is not None else None
        long = min(written, as_count(getattr(ttl, "ttl_12h_tokens", 0))) if ttl is not None else 0
        return Usage(input=total - cached - written, output=output, reasoning=reasoning,
                     reasoning_reported=odetails is not None and getattr(odetails, "reasoning_tokens", None) is not None,
                     cache_read=cached, cache_write=written - long, cache_write_long=long)

    def _truncated(self, response: Any) -> bool:
        if self.api == "responses":
            details = getattr(response, "incomplete_details", None)
            return (getattr(response, "status", None) == "incomplete"
                    and getattr(details, "reason", None) == "max_output_tokens")
        choice, _ = self._message(response)
        return getattr(choice, "finish_reason", None) == "length"

    def _refusal(self, response: Any) -> str | None:
        """A stop no repair can mend: a content filter, an answer that is a refusal, or (Responses) an
        incomplete answer for any reason but its output limit (which the truncation retry handles)."""
        if self.api == "responses":
            details = getattr(response, "incomplete_details", None)
            reason = getattr(details, "reason", None)
            if getattr(response, "status", None) == "incomplete" and reason != "max_output_tokens":
                return f"the answer is incomplete: {reason or 'no reason given'} (status=incomplete)"
            for item in getattr(response, "output", None) or []:
                for part in getattr(item, "content", None) or [] if getattr(item, "type", None) == "message" else []:
                    if getattr(part, "type", None) == "refusal":
                        return f"the model declined to answer: {getattr(part, 'refusal', '')}"
            return None
        choice, message = self._message(response)
        if getattr(choice, "finish_reason", None) == "content_filter":
            return "the answer was withheld by a content filter (finish_reason=content_filter)"
        refusal = getattr(message, "refusal", None) if message is not None else None
        if refusal and not (getattr(message, "content", None) or getattr(message, "tool_calls", None)):
            return f"the model declined to answer: {refusal}"
        return None

    def _stop_text(self, response: Any) -> str:
        if self.api == "responses":
            return f"status={getattr(response, 'status', None)}"
        choice, _ = self._message(response)
        return f"finish_reason={getattr(choice, 'finish_reason', None)}"

    @staticmethod
    def _message(response: Any):
        choices = getattr(response, "choices", None) or []
        return (choices[0], getattr(choices[0], "message", None)) if choices else (None, None)

    def _text(self, response: Any) -> str:
        if self.api == "responses":
            out = []
            for item in getattr(response, "output", None) or []:
                if getattr(item, "type", None) == "message":
                    for part in getattr(item, "content", None) or []:
                        if getattr(part, "type", None) == "output_text":
                            out.append(getattr(part, "text", "") or "")
            return "\n".join(out)
        _, message = self._message(response)
        return (getattr(message, "content", None) or "") if message is not None else ""

    def _function_call(self, response: Any):
        if self.api == "responses":
            calls = [i for i in (getattr(response, "output", None) or []) if getattr(i, "type", None) == "function_call"]
            named = [c for c in calls if getattr(c, "name", None) == TOOL_NAME]
            return (named or calls or [None])[0]
        _, message = self._message(response)
        calls = [c for c in (getattr(message, "tool_calls", None) or []) if getattr(c, "function", None) is not None]
        named = [c for c in calls if getattr(c.function, "name", None) == TOOL_NAME]
        return (named or calls or [None])[0]

    def _tool_args(self, response: Any) -> tuple[bool, object, str | None]:
        call = self._function_call(response)
        if call is None:
            return False, None, None
        raw = call.arguments if self.api == "responses" else call.function.arguments
        if isinstance(raw, dict):             # some compatible servers send an object
            return True, raw, None
        deep = nesting_problem(raw) if isinstance(raw, str) else None
        if deep:
            return True, None, f"the arguments are {deep.replace('JSON ', '', 1)}"
        try:
            return True, json.loads(raw or ""), None
        except (TypeError, ValueError) as exc:
            return True, None, f"the arguments are not valid JSON ({exc})"

    def _repair_body(self, body: dict, response: Any, problem: str) -> dict:
        return (self._repair_responses if self.api == "responses" else self._repair_chat)(body, response, problem)

    def _repair_responses(self, body: dict, response: Any, problem: str) -> dict:
        new = copy.deepcopy(body)
        text = self.repair_text(problem)
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

    def _repair_chat(self, body: dict, response: Any, problem: str) -> dict:
        _, message = self._message(response)
        call = self._function_call(response) if message is not None else None
        text = self.repair_text(problem)
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

    def _add_user_text(self, body: dict, text: str) -> dict:
        new = copy.deepcopy(body)
        if "input" in new:
            new["input"].append({"role": "user", "content": [{"type": "input_text", "text": text}]})
        else:
            new["messages"].append({"role": "user", "content": text})
        return new

    def _conversation_body(self, body: dict, system: str, messages: list[dict]) -> dict:
        drop = ("tools", "tool_choice", "parallel_tool_calls", "instructions", "input", "messages")
        new = {k: copy.deepcopy(v) for k, v in body.items() if k not in drop}
        if self.api == "responses":
            if system:
                new["instructions"] = system
            new["input"] = [{"role": m["role"], "content": [{"type": "input_text", "text": m["content"]}]}
                            if m["role"] == "user" else {"role": m["role"], "content": m["content"]}
                            for m in messages]
        else:
            new["messages"] = ([{"role": "system", "content": system}] if system else []) + [
                {"role": m["role"], "content": m["content"]} for m in messages]
        return new

    def _relaxations(self) -> list[Relaxation]:
        unsupported = re.compile(r"unsupported|not supported|does not support|unrecognized|unknown|instead")
        return [
            WITHOUT_TEMPERATURE,
            Relaxation("effort_value", sent=lambda b: _effort_of(b) is not None,
                       named=lambda m: bool(re.search(r"reasoning[._]effort", m)) and "supported values" in m,
                       apply=lambda b: b, adapt=_supported_effort,
                       note="sent again with a reasoning effort the model lists"),
            Relaxation("reasoning_summary", sent=lambda b: "summary" in (b.get("reasoning") or {}),
                       named=lambda m: "summary" in m,
                       apply=_without_summary,
                       note="sent again without reasoning.summary"),
            Relaxation("reasoning", sent=lambda b: _effort_of(b) is not None,
                       named=lambda m: bool(re.search(r"reasoning", m)) and bool(unsupported.search(m)),
                       apply=_without_reasoning,
                       note="sent again without reasoning (the model is not a reasoning model)"),
            Relaxation("max_tokens_field",
                       sent=lambda b: any(f in b for f in LIMIT_FIELDS),
                       named=lambda m: bool(unsupported.search(m)) and any(
                           re.search(rf"\b{f}\b", m) for f in LIMIT_FIELDS),
                       apply=_swap_limit_field,
                       note="sent again with the other output-limit field (max_tokens / max_completion_tokens)"),
            Relaxation("forced_tool_choice", sent=lambda b: isinstance(b.get("tool_choice"), dict),
                       named=lambda m: "tool_choice" in m,
                       apply=lambda b: {**copy.deepcopy(b), "tool_choice": "auto"},
                       note="sent again with tool_choice auto"),
            Relaxation("stream_options", sent=lambda b: "stream_options" in b,
                       named=lambda m: "stream_options" in m,
                       apply=lambda b: {k: v for k, v in b.items() if k != "stream_options"},
                       note="sent again without stream_options"),
            Relaxation("prompt_cache", sent=lambda b: "prompt_cache_key" in b or "prompt_cache_options" in b,
                       named=lambda m: "prompt_cache" in m,
                       apply=lambda b: {k: v for k, v in b.items()
                                        if k not in ("prompt_cache_key", "prompt_cache_options")},
                       note="sent again without prompt-cache parameters"),
        ]


def _effort_of(body: dict) -> str | None:
    if isinstance(body.get("reasoning"), dict):
        return body["reasoning"].get("effort")
    return body.get("reasoning_effort")


def _supported_effort(body: dict, message: str) -> dict:
    """``body`` with the effort stepped to the highest value the error message lists as supported
    at or below the one sent (the lowest listed if none is below)."""
    listed = [v for v in re.findall(r"'([a-z]+)'", message.lower().split("supported values", 1)[-1]) if v in _ORDER]
    sent = _effort_of(body) or "high"
    if not listed:
        return _without_reasoning(body)
    below = [v for v in listed if _ORDER.index(v) <= _ORDER.index(sent)] if sent in _ORDER else []
    pick = max(below, key=_ORDER.index) if below else min(listed, key=_ORDER.index)
    new = copy.deepcopy(body)
    if isinstance(new.get("reasoning"), dict):
        new["reasoning"]["effort"] = pick
        if pick == "none":
            new.pop("include", None)
            new["reasoning"].pop("summary", None)
    else:
        new["reasoning_effort"] = pick
    return new


def _without_summary(body: dict) -> dict:
    new = copy.deepcopy(body)
    new["reasoning"].pop("summary", None)
    return new


def _without_reasoning(body: dict) -> dict:
    return {k: v for k, v in body.items() if k not in ("reasoning", "reasoning_effort", "include")}


def _swap_limit_field(body: dict) -> dict:
    new = copy.deepcopy(body)
    for old, other in (("max_tokens", "max_completion_tokens"), ("max_completion_tokens", "max_tokens")):
        if old in new:
            new[other] = new.pop(old)
            break
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
