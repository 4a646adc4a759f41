"""Candidates from OpenAI models, or any OpenAI-compatible server (vLLM, Ollama, llama.cpp ...),
through the official ``openai`` SDK (Chat Completions).

Each request offers one function tool, ``submit_kernel`` (``strict`` off; parameters:
:data:`schema.PROPOSAL_SCHEMA`), forced with ``tool_choice``; the arguments in
``tool_calls[0].function.arguments`` are parsed as JSON and checked.  Malformed JSON or a schema
failure gets one repair turn (the assistant message with its tool call, then a ``tool`` message
quoting the problem).  Local servers that ignore tools and answer in prose are accepted when the
text holds a fenced ```cuda / ```cpp / ```c++ block with a ``__global__`` function; such a
proposal's rationale starts with ``[from text]``.
"""
from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import EnvironmentProblem
from .base import ProposalRequest
from .models import ModelProposer, Reading, import_sdk, kernel_from_text
from .pricing import PriceTable
from .retry import RetryPolicy
from .schema import TOOL_DESCRIPTION, TOOL_NAME, check_proposal, proposal_schema

NO_KEY = "not-needed"


class OpenAIProposer(ModelProposer):
    provider = "openai"

    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 max_tokens: int = 8192, temperature: float | None = None, timeout: float = 120,
                 max_attempts: int = 5, prices: PriceTable | Mapping[str, object] | None = None, *,
                 sleep: Callable[[float], None] | None = None, retry: RetryPolicy | None = None,
                 parallel: int = 4, max_tokens_field: str | None = None):
        super().__init__(model, api_key=api_key, base_url=base_url, max_tokens=max_tokens,
                         temperature=temperature, timeout=timeout, max_attempts=max_attempts,
                         prices=prices, sleep=sleep, retry=retry, parallel=parallel)
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
        # OpenAI's own endpoint wants max_completion_tokens (reasoning models reject max_tokens);
        # most compatible servers know max_tokens.
        if max_tokens_field is None:
            max_tokens_field = "max_completion_tokens" if base_url is None else "max_tokens"
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                             f"got {max_tokens_field!r}")
        self.max_tokens_field = max_tokens_field
        self._client = self._sdk.OpenAI(api_key=key, base_url=base_url, timeout=self.timeout,
                                        max_retries=0)
        self._tool = {"type": "function",
                      "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                                   "parameters": proposal_schema(), "strict": False}}

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest) -> dict:
        messages: list[dict] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.append({"role": "user", "content": request.prompt})
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "tools": [copy.deepcopy(self._tool)],
            "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}},
            self.max_tokens_field: self.max_tokens,
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def _send(self, body: dict) -> Any:
        return self._client.chat.completions.create(**copy.deepcopy(body))

    def _usage(self, response: Any) -> tuple[int, int]:
        usage = getattr(response, "usage", None)
        if usage is None:
            return 0, 0
        try:
            return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)
        except (TypeError, ValueError):
            return 0, 0

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
                problem = f"the arguments are not valid JSON ({exc})"
                if getattr(choice, "finish_reason", None) == "length":
                    problem += " (the answer was cut off at the token limit)"
                return Reading(problem=problem)
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
