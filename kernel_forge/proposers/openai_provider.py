"""Candidates from OpenAI models, or any OpenAI-compatible server (vLLM, Ollama, llama.cpp ...),
through the official ``openai`` SDK (Chat Completions).

Each request offers one function tool, ``submit_kernel`` (``strict`` off; parameters:
:data:`schema.PROPOSAL_SCHEMA`), forced with ``tool_choice``; the arguments in
``tool_calls[0].function.arguments`` are parsed as JSON and checked.  Malformed JSON or a schema
failure gets one repair turn (the assistant message with its tool call, then a ``tool`` message
quoting the problem).  Local servers that ignore tools and answer in prose are accepted when the
text holds a fenced ```cuda / ```cpp / ```c++ block with a ``__global__`` function; such a
proposal's rationale starts with ``[from text]``.

The user message starts with ``request.static_prefix`` (then the proposal's dynamic prompt), so
that OpenAI's automatic prefix caching applies; cached input tokens
(``usage.prompt_tokens_details.cached_tokens``) are priced at the cached-input rate and reasoning
tokens (``usage.completion_tokens_details.reasoning_tokens``) recorded.  ``reasoning_effort`` is
sent when set; the output limit goes in ``max_completion_tokens`` (OpenAI's endpoint) or
``max_tokens`` (other base URLs), as ``max_tokens_field`` says.  Answers are streamed by default
(``stream=True`` with ``stream_options={"include_usage": True}``, assembled by the SDK's
``ChatCompletionStreamState``), so the timeout bounds the silence between chunks.
"""
from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import EnvironmentProblem, InputError
from .base import ProposalRequest
from .models import (ASSEMBLY_ERRORS, ModelProposer, Reading, Relaxation, StreamAssemblyError, Usage, _int,
                     import_sdk, kernel_from_text)
from .pricing import PriceTable
from .retry import RetryPolicy
from .schema import TOOL_DESCRIPTION, TOOL_NAME, check_proposal, proposal_schema

NO_KEY = "not-needed"
LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class EmptyStream(Exception):
    """The server closed a streamed answer without sending any chunk."""


class OpenAIProposer(ModelProposer):
    provider = "openai"

    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 max_tokens: int = 8192, temperature: float | None = None, timeout: float = 120,
                 max_attempts: int = 5, prices: PriceTable | Mapping[str, object] | None = None, *,
                 sleep: Callable[[float], None] | None = None, retry: RetryPolicy | None = None,
                 parallel: int = 4, max_tokens_field: str | None = None, stream: bool = True,
                 max_tokens_cap: int | None = None, timeout_retries: int = 2,
                 reasoning_effort: str | None = None):
        if reasoning_effort is not None and reasoning_effort not in EFFORTS:
            raise InputError(f"openai: reasoning_effort must be one of {', '.join(EFFORTS)}, "
                             f"got {reasoning_effort!r}")
        # OpenAI's own endpoint wants max_completion_tokens (reasoning models reject max_tokens);
        # most compatible servers know max_tokens.
        if max_tokens_field is None:
            max_tokens_field = "max_completion_tokens" if base_url is None else "max_tokens"
        if max_tokens_field not in LIMIT_FIELDS:
            raise InputError(f"openai: max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                             f"got {max_tokens_field!r}")
        self.max_tokens_field = max_tokens_field
        super().__init__(model, api_key=api_key, base_url=base_url, max_tokens=max_tokens,
                         temperature=temperature, timeout=timeout, max_attempts=max_attempts,
                         prices=prices, sleep=sleep, retry=retry, parallel=parallel, stream=stream,
                         max_tokens_cap=max_tokens_cap, timeout_retries=timeout_retries,
                         reasoning_effort=reasoning_effort)
        self._sdk = import_sdk("openai", "openai>=1.100")
        self._sdk_error = self._sdk.OpenAIError
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key:
            if base_url is None:
                raise EnvironmentProblem(
                    "no OpenAI API key: set OPENAI_API_KEY or pass api_key",
                    hint="export OPENAI_API_KEY=sk-...  (a local OpenAI-compatible server given "
                         "with --base-url needs no key)")
            key = NO_KEY
        self._secrets = (key,) if key != NO_KEY else ()
        self._client = self._sdk.OpenAI(api_key=key, base_url=base_url, timeout=self._timeout(),
                                        max_retries=0)
        self._tool = {"type": "function",
                      "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                                   "parameters": proposal_schema(), "strict": False}}

    def _limit_field(self, body: dict) -> str:
        return next((f for f in LIMIT_FIELDS if f in body), self.max_tokens_field)

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest, index: int) -> dict:
        messages: list[dict] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        # the static prefix first, in the same message: OpenAI caches the longest common prefix
        messages.append({"role": "user", "content": request.full_prompt(index)})
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "tools": [copy.deepcopy(self._tool)],
            "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}},
            self.max_tokens_field: self.max_tokens,
        }
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _send(self, body: dict) -> Any:
        kwargs = copy.deepcopy(body)
        if not kwargs.get("stream"):
            return self._client.chat.completions.create(**kwargs)
        from openai.lib.streaming.chat import ChatCompletionStreamState

        state = ChatCompletionStreamState()
        chunks = 0
        stream = self._client.chat.completions.create(**kwargs)
        try:
            for chunk in stream:
                try:
                    state.handle_chunk(chunk)
                except ASSEMBLY_ERRORS as exc:
                    raise StreamAssemblyError(f"chunk {chunks + 1}: {type(exc).__name__}: {exc}") from exc
                chunks += 1
        finally:
            stream.close()
        if not chunks:
            raise EmptyStream("the streamed answer held no chunk")
        # the snapshot, not get_final_completion(): that one raises on finish_reason "length",
        # which is handled here as a truncated answer
        return state.current_completion_snapshot

    def _classify(self, exc: BaseException):
        from .retry import Failure

        if isinstance(exc, EmptyStream):
            return Failure(retryable=True, description=f"empty answer: {exc}", kind="dropped")
        return super()._classify(exc)

    def _usage(self, response: Any) -> Usage:
        usage = getattr(response, "usage", None)
        if usage is None:
            return Usage()
        prompt = _int(getattr(usage, "prompt_tokens", 0))
        pdetails = getattr(usage, "prompt_tokens_details", None)
        cdetails = getattr(usage, "completion_tokens_details", None)
        cached = min(prompt, _int(getattr(pdetails, "cached_tokens", 0))) if pdetails is not None else 0
        written = min(prompt - cached, _int(getattr(pdetails, "cache_write_tokens", 0))) if pdetails is not None else 0
        return Usage(input=prompt - cached - written, output=_int(getattr(usage, "completion_tokens", 0)),
                     reasoning=_int(getattr(cdetails, "reasoning_tokens", 0)) if cdetails is not None else 0,
                     cache_read=cached, cache_write=written)

    def _truncated(self, response: Any) -> bool:
        choice, _ = self._message(response)
        return getattr(choice, "finish_reason", None) == "length"

    @staticmethod
    def _message(response: Any):
        choices = getattr(response, "choices", None) or []
        return (choices[0], getattr(choices[0], "message", None)) if choices else (None, None)

    @staticmethod
    def _tool_call(message: Any):
        calls = [c for c in (getattr(message, "tool_calls", None) or []) if getattr(c, "function", None) is not None]
        named = [c for c in calls if getattr(c.function, "name", None) == TOOL_NAME]
        return (named or calls or [None])[0]

    def _read(self, response: Any) -> Reading:
        choice, message = self._message(response)
        if message is None:
            return Reading(problem="the answer held no message (empty choices)")
        call = self._tool_call(message)
        if call is None:
            found = kernel_from_text(getattr(message, "content", None) or "")
            if found is not None:
                source, rest = found
                args = {"source": source, "rationale": rest}
                return Reading(args=args, problem=check_proposal(args), rationale_prefix="[from text]")
            finish = getattr(choice, "finish_reason", None)
            return Reading(problem=f"the answer held no {TOOL_NAME} tool call and no fenced CUDA "
                                   f"block with a __global__ function (finish_reason={finish})")
        raw = call.function.arguments
        if isinstance(raw, dict):             # some compatible servers send an object
            args: object = raw
        else:
            try:
                args = json.loads(raw or "")
            except (TypeError, ValueError) as exc:
                return Reading(problem=f"the arguments are not valid JSON ({exc})")
        problem = check_proposal(args)
        return Reading(args=args if isinstance(args, dict) else None, problem=problem)

    def _repair_body(self, body: dict, response: Any, problem: str) -> dict:
        _, message = self._message(response)
        call = self._tool_call(message) if message is not None else None
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
        new["messages"].append({"role": "user", "content": text})
        return new

    def _relaxations(self) -> list[Relaxation]:
        unsupported = re.compile(r"unsupported|not supported|does not support|unrecognized|unknown|instead")
        return [
            Relaxation("temperature", sent=lambda b: "temperature" in b,
                       named=lambda m: "temperature" in m,
                       apply=lambda b: {k: v for k, v in b.items() if k != "temperature"},
                       note="sent again without temperature"),
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
        ]


def _swap_limit_field(body: dict) -> dict:
    new = copy.deepcopy(body)
    for old, other in (("max_tokens", "max_completion_tokens"), ("max_completion_tokens", "max_tokens")):
        if old in new:
            new[other] = new.pop(old)
            break
    return new
