"""Candidates from Anthropic models through the official ``anthropic`` SDK (Messages API).

Each request offers one tool, ``submit_kernel`` (input schema: :data:`schema.PROPOSAL_SCHEMA`).
Without thinking it is forced with ``tool_choice``; with thinking (a ``thinking_budget``, or
``thinking="adaptive"``) Anthropic allows only ``tool_choice`` auto, so the answer may come as text,
which the fenced-block fallback and the repair turn cover.  A model that rejects a forced tool
choice, a temperature or manual thinking with an HTTP 400 gets the request again without it (see
:class:`~.models.Relaxation`).

Prompt caching: the system prompt and ``request.static_prefix`` are sent as their own text blocks
with ``cache_control: {"type": "ephemeral"}`` (the tool definition, which comes first, is cached
with them), followed by the dynamic part of the proposal's prompt.  Cache reads and writes are
priced at their own rates.

A malformed answer gets one repair turn: the assistant's turn is replayed -- thinking and
redacted-thinking blocks unchanged, with their signatures, as the API requires -- and a
``tool_result`` with ``is_error`` (or, when no tool was called, a user message) quotes the
problem.  Answers are streamed by default (``messages.stream(...).get_final_message()``), so the
timeout bounds the silence between chunks rather than the whole answer.  The SDK's own retries
are off (``max_retries=0``): the policy in :mod:`.retry` applies and counts attempts.
``anthropic`` is imported only when a proposer is built, so ``import kernel_forge`` does not load it.
"""
from __future__ import annotations

import copy
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

CACHE = {"cache_control": {"type": "ephemeral"}}
THINKING_MODES = ("adaptive", "disabled")
EFFORTS = ("low", "medium", "high", "xhigh", "max")
MIN_THINKING_BUDGET = 1024          # the API's minimum budget_tokens


class AnthropicProposer(ModelProposer):
    provider = "anthropic"

    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 max_tokens: int = 8192, temperature: float | None = None, timeout: float = 120,
                 max_attempts: int = 5, prices: PriceTable | Mapping[str, object] | None = None, *,
                 sleep: Callable[[float], None] | None = None, retry: RetryPolicy | None = None,
                 parallel: int = 4, stream: bool = True, max_tokens_cap: int | None = None,
                 timeout_retries: int = 2, reasoning_effort: str | None = None,
                 thinking_budget: int | None = None, thinking: str | None = None, prompt_cache: bool = True):
        if thinking_budget is not None and thinking_budget != 0:
            if thinking_budget < MIN_THINKING_BUDGET:
                raise InputError(f"anthropic: thinking_budget must be >= {MIN_THINKING_BUDGET} tokens "
                                 f"(the API's minimum), got {thinking_budget}")
            if thinking is not None:
                raise InputError(f"anthropic: give thinking_budget (manual extended thinking) or thinking="
                                 f"{thinking!r}, not both")
        if thinking is not None and thinking not in THINKING_MODES:
            raise InputError(f"anthropic: thinking must be one of {', '.join(THINKING_MODES)}, got {thinking!r}")
        if reasoning_effort is not None and reasoning_effort not in EFFORTS:
            raise InputError(f"anthropic: reasoning effort (output_config.effort) must be one of "
                             f"{', '.join(EFFORTS)}, got {reasoning_effort!r}")
        self.thinking_budget = int(thinking_budget) if thinking_budget else None
        self.thinking = thinking
        self.prompt_cache = bool(prompt_cache)
        # the budget counts toward max_tokens: the limit of a request is the answer's plus the budget
        answer = int(max_tokens)
        limit = answer + (self.thinking_budget or 0)
        cap = max_tokens_cap if max_tokens_cap is not None else 4 * answer
        super().__init__(model, api_key=api_key, base_url=base_url, max_tokens=limit,
                         temperature=temperature, timeout=timeout, max_attempts=max_attempts,
                         prices=prices, sleep=sleep, retry=retry, parallel=parallel, stream=stream,
                         max_tokens_cap=max(cap, limit), timeout_retries=timeout_retries,
                         reasoning_effort=reasoning_effort)
        self._sdk = import_sdk("anthropic", "anthropic>=0.60")
        self._sdk_error = self._sdk.AnthropicError
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            if base_url is None:
                raise EnvironmentProblem(
                    "no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key",
                    hint="export ANTHROPIC_API_KEY=sk-ant-...  (or use --base-url for a local "
                         "Anthropic-compatible server that needs no key)")
            key = "not-needed"
        self._secrets = (key,)
        self._client = self._sdk.Anthropic(api_key=key, base_url=base_url, timeout=self._timeout(),
                                           max_retries=0)
        self._tool = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                      "input_schema": proposal_schema()}

    @property
    def thinks(self) -> bool:
        """Thinking is asked for, so ``tool_choice`` must be auto."""
        return self.thinking_budget is not None or self.thinking == "adaptive"

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest, index: int) -> dict:
        dynamic = request.prompt_for(index)
        cache = CACHE if self.prompt_cache else {}
        if request.static_prefix:
            content: Any = [{"type": "text", "text": request.static_prefix, **copy.deepcopy(cache)},
                            {"type": "text", "text": dynamic}]
        else:
            content = dynamic
        choice = {"type": "auto"} if self.thinks else {"type": "tool", "name": TOOL_NAME}
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "user", "content": content}],
            "tools": [copy.deepcopy(self._tool)],
            "tool_choice": {**choice, "disable_parallel_tool_use": True},
        }
        if request.system:
            body["system"] = ([{"type": "text", "text": request.system, **copy.deepcopy(cache)}]
                              if self.prompt_cache else request.system)
        if self.thinking_budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        elif self.thinking is not None:
            body["thinking"] = {"type": self.thinking}
        if self.reasoning_effort is not None:
            body["output_config"] = {"effort": self.reasoning_effort}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.stream:
            body["stream"] = True
        return body

    def _send(self, body: dict) -> Any:
        kwargs = copy.deepcopy(body)
        stream = kwargs.pop("stream", False)
        # fields some SDK releases have no argument for (this one has no temperature) go as extra body
        extra = {k: kwargs.pop(k) for k in ("temperature", "output_config") if k in kwargs}
        if stream:
            with self._client.messages.stream(**kwargs, extra_body=extra or None) as answer:
                try:
                    return answer.get_final_message()
                except self._sdk_error:
                    raise
                except ASSEMBLY_ERRORS as exc:
                    raise StreamAssemblyError(f"{type(exc).__name__}: {exc}") from exc
        return self._client.messages.create(**kwargs, extra_body=extra or None)

    def _usage(self, response: Any) -> Usage:
        usage = getattr(response, "usage", None)
        if usage is None:
            return Usage()
        written = _int(getattr(usage, "cache_creation_input_tokens", 0))
        by_ttl = getattr(usage, "cache_creation", None)
        hour = min(written, _int(getattr(by_ttl, "ephemeral_1h_input_tokens", 0))) if by_ttl is not None else 0
        details = getattr(usage, "output_tokens_details", None)
        return Usage(input=_int(getattr(usage, "input_tokens", 0)),
                     output=_int(getattr(usage, "output_tokens", 0)),
                     reasoning=_int(getattr(details, "thinking_tokens", 0)) if details is not None else 0,
                     cache_read=_int(getattr(usage, "cache_read_input_tokens", 0)),
                     cache_write=written - hour, cache_write_1h=hour)

    def _truncated(self, response: Any) -> bool:
        return getattr(response, "stop_reason", None) == "max_tokens"

    def _read(self, response: Any) -> Reading:
        blocks = list(getattr(response, "content", None) or [])
        uses = [b for b in blocks if getattr(b, "type", None) == "tool_use"]
        use = next((b for b in uses if getattr(b, "name", None) == TOOL_NAME), None)
        if use is None:
            text = "\n".join(getattr(b, "text", "") or "" for b in blocks if getattr(b, "type", None) == "text")
            found = kernel_from_text(text)
            if found is not None:
                source, rest = found
                args = {"source": source, "rationale": rest}
                return Reading(args=args, problem=check_proposal(args), rationale_prefix="[from text]")
            stop = getattr(response, "stop_reason", None)
            return Reading(problem=f"the answer held no {TOOL_NAME} tool call and no fenced CUDA block "
                                   f"with a __global__ function (stop_reason={stop})")
        args = getattr(use, "input", None)
        problem = check_proposal(args)
        return Reading(args=args if isinstance(args, dict) else None, problem=problem)

    @staticmethod
    def _replay(block: Any) -> dict | None:
        """An answer's content block as it must be sent back in the next request."""
        kind = getattr(block, "type", None)
        if kind == "thinking":           # unchanged, signature included: the API verifies it
            return {"type": "thinking", "thinking": getattr(block, "thinking", "") or "",
                    "signature": getattr(block, "signature", "") or ""}
        if kind == "redacted_thinking":
            return {"type": "redacted_thinking", "data": getattr(block, "data", "") or ""}
        if kind == "text" and getattr(block, "text", ""):
            return {"type": "text", "text": block.text}
        if kind == "tool_use":
            # the API only takes an object as input; replay anything else as {}
            tool_input = block.input if isinstance(block.input, dict) else {}
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input}
        return None

    def _repair_body(self, body: dict, response: Any, problem: str) -> dict:
        blocks = list(getattr(response, "content", None) or [])
        assistant = [r for r in (self._replay(b) for b in blocks) if r is not None]
        text = self.repair_text(problem)
        uses = [a for a in assistant if a["type"] == "tool_use"]
        if uses:
            # every tool_use needs a tool_result in the next user turn
            results = []
            for i, u in enumerate(uses):
                results.append({"type": "tool_result", "tool_use_id": u["id"], "is_error": True,
                                "content": text if i == 0 else f"ignored: only one {TOOL_NAME} call is used"})
            user = {"role": "user", "content": results}
        else:
            user = {"role": "user", "content": text}
        new = copy.deepcopy(body)
        if assistant:
            new["messages"].append({"role": "assistant", "content": assistant})
        new["messages"].append(user)
        return new

    def _add_user_text(self, body: dict, text: str) -> dict:
        new = copy.deepcopy(body)
        last = new["messages"][-1]
        if last.get("role") == "user":
            content = last["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            last["content"] = blocks + [{"type": "text", "text": text}]
        else:
            new["messages"].append({"role": "user", "content": text})
        return new

    def _relaxations(self) -> list[Relaxation]:
        return [
            Relaxation("temperature", sent=lambda b: "temperature" in b,
                       named=lambda m: "temperature" in m,
                       apply=lambda b: {k: v for k, v in b.items() if k != "temperature"},
                       note="sent again without temperature"),
            Relaxation("forced_tool_choice", sent=lambda b: b.get("tool_choice", {}).get("type") == "tool",
                       named=lambda m: bool(re.search(r"tool_choice|forc\w* tool|tool use", m)),
                       apply=_auto_tool_choice,
                       note="sent again with tool_choice auto"),
            Relaxation("manual_thinking", sent=lambda b: b.get("thinking", {}).get("type") == "enabled",
                       named=lambda m: "thinking" in m or "budget_tokens" in m,
                       apply=_adaptive_thinking,
                       note="sent again with adaptive thinking instead of a thinking budget"),
        ]


def _auto_tool_choice(body: dict) -> dict:
    new = copy.deepcopy(body)
    new["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
    return new


def _adaptive_thinking(body: dict) -> dict:
    new = copy.deepcopy(body)
    new["thinking"] = {"type": "adaptive"}
    new["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
    return new
