"""Candidates from Anthropic models through the official ``anthropic`` SDK (Messages API).

Each request offers one tool, ``submit_kernel`` (input schema: :data:`schema.PROPOSAL_SCHEMA`),
and forces it with ``tool_choice``.  A malformed answer gets one repair turn: the assistant's
turn is replayed and a ``tool_result`` with ``is_error`` (or, when no tool was called, a user
message) quotes the problem.  The SDK's own retries are off (``max_retries=0``): the policy in
:mod:`.retry` applies and counts attempts.  ``anthropic`` is imported only when a proposer is
built, so ``import kernel_forge`` does not need it.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import EnvironmentProblem
from .base import ProposalRequest
from .models import ModelProposer, Reading, import_sdk, kernel_from_text
from .pricing import PriceTable
from .retry import RetryPolicy
from .schema import TOOL_DESCRIPTION, TOOL_NAME, check_proposal, proposal_schema


class AnthropicProposer(ModelProposer):
    provider = "anthropic"

    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 max_tokens: int = 8192, temperature: float | None = None, timeout: float = 120,
                 max_attempts: int = 5, prices: PriceTable | Mapping[str, object] | None = None, *,
                 sleep: Callable[[float], None] | None = None, retry: RetryPolicy | None = None,
                 parallel: int = 4):
        super().__init__(model, api_key=api_key, base_url=base_url, max_tokens=max_tokens,
                         temperature=temperature, timeout=timeout, max_attempts=max_attempts,
                         prices=prices, sleep=sleep, retry=retry, parallel=parallel)
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
        self._client = self._sdk.Anthropic(api_key=key, base_url=base_url, timeout=self.timeout,
                                           max_retries=0)
        self._tool = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                      "input_schema": proposal_schema()}

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "user", "content": request.prompt}],
            "tools": [copy.deepcopy(self._tool)],
            "tool_choice": {"type": "tool", "name": TOOL_NAME, "disable_parallel_tool_use": True},
        }
        if request.system:
            body["system"] = request.system
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def _send(self, body: dict) -> Any:
        kwargs = copy.deepcopy(body)
        # this SDK's create() has no temperature argument: send it as an extra body field
        extra = {k: kwargs.pop(k) for k in ("temperature",) if k in kwargs}
        return self._client.messages.create(**kwargs, extra_body=extra or None)

    def _usage(self, response: Any) -> tuple[int, int]:
        usage = getattr(response, "usage", None)
        if usage is None:
            return 0, 0
        try:
            # cache writes and reads are input too (priced here at the plain input rate)
            tin = (getattr(usage, "input_tokens", 0) or 0) \
                + (getattr(usage, "cache_creation_input_tokens", 0) or 0) \
                + (getattr(usage, "cache_read_input_tokens", 0) or 0)
            return int(tin), int(getattr(usage, "output_tokens", 0) or 0)
        except (TypeError, ValueError):
            return 0, 0

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
            return Reading(problem=f"the answer held no {TOOL_NAME} tool call (stop_reason={stop})")
        args = getattr(use, "input", None)
        problem = check_proposal(args)
        if problem is not None and getattr(response, "stop_reason", None) == "max_tokens":
            problem += " (the answer was cut off at max_tokens)"
        return Reading(args=args if isinstance(args, dict) else None, problem=problem)

    def _repair_body(self, body: dict, response: Any, problem: str) -> dict:
        blocks = list(getattr(response, "content", None) or [])
        assistant: list[dict] = []
        for b in blocks:
            kind = getattr(b, "type", None)
            if kind == "text" and getattr(b, "text", ""):
                assistant.append({"type": "text", "text": b.text})
            elif kind == "tool_use":
                # the API only takes an object as input; replay anything else as {}
                tool_input = b.input if isinstance(b.input, dict) else {}
                assistant.append({"type": "tool_use", "id": b.id, "name": b.name, "input": tool_input})
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
