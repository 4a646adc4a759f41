"""Candidates from Anthropic models through the official ``anthropic`` SDK (Messages API).

The request is built from the model's capability entry (:mod:`.capabilities`):

* **thinking** on by default: ``{"type": "adaptive"}`` where the model has adaptive thinking (the
  only form Claude Opus 4.7 and later take), ``{"type": "enabled", "budget_tokens": B}`` where a
  budget is all it takes (Claude Haiku 4.5, Opus 4.5); ``thinking="disabled"`` sends the model's
  own off value (``disabled``, or ``between_tools`` on Claude Sonnet 5.5) and is refused in favour
  of adaptive thinking on a model that always thinks;
* ``output_config.effort``: the effort asked for (default ``high``), stepped down to the highest
  level the model takes (``max`` -> ``xhigh`` -> ``high``);
* a ``temperature`` only where the model takes one (never from Opus 4.7 on; before that only
  without thinking);
* ``max_tokens``: thinking plus a whole kernel (32,000 where the model thinks, within its maximum).

The answer is text: the kernel in a fenced block (or search/replace edits) and a small JSON part
(:mod:`.answer`); no tool is offered.  With ``answer_format="tool"`` the request offers
``submit_kernel`` and forces it only where the table says the model allows a forced tool choice
(never on Fable 5.1 / Opus 5.5 / Sonnet 5.5; on older models only without thinking).

Prompt caching: the system prompt and ``request.static_prefix`` end at one ``cache_control``
breakpoint (1-hour lifetime when an iteration takes longer than 5 minutes) where that part alone
clears the model's minimum cacheable prompt (below it a breakpoint caches nothing, so none is
placed), the sections every proposal of the request shares at a second one (5 minutes), then
each proposal's own part.  A non-streamed answer gets a timeout as long as its ``max_tokens``
takes (:meth:`~.provider.ModelProposer._request_timeout`).

Usage: ``input_tokens`` (uncached), ``cache_read_input_tokens``, ``cache_creation_input_tokens``
with ``cache_creation.ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``,
``output_tokens`` and, where the API returns it, ``output_tokens_details.thinking_tokens`` (the
anthropic SDK 2.17 ``Usage`` type; ``reasoning_reported`` is False on an answer without it).

A malformed answer gets one repair turn: the assistant's turn is replayed -- thinking and
redacted-thinking blocks unchanged, with their signatures, as the API requires -- then a user
message (or a ``tool_result`` with ``is_error``) quoting the problem.  Answers are streamed by
default.  The SDK's own retries are off (``max_retries=0``).  ``anthropic`` is imported only when a
proposer is built, so ``import kernel_forge`` does not load it.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from kernel_forge.common.errors import InputError
from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.provider import DEFAULT_EFFORT, ModelProposer
from kernel_forge.proposers.relaxation import WITHOUT_TEMPERATURE, Relaxation
from kernel_forge.proposers.transport import ASSEMBLY_ERRORS, StreamAssemblyError, as_count, import_sdk
from kernel_forge.proposers.usage import Progress, Usage
from kernel_forge.proposers.options import ProviderOptions, choices
from kernel_forge.proposers.retry import MidStreamError
from kernel_forge.proposers.proposal_schema import TOOL_DESCRIPTION, TOOL_NAME, proposal_schema

#: the anthropic SDK releases kforge is tested with (pyproject.toml says the same)
SDK_REQUIREMENT = "anthropic>=2.17,<3"
THINKING_MODES = choices("thinking")
EFFORTS = ("low", "medium", "high", "xhigh", "max")
MIN_THINKING_BUDGET = 1024          # the API's minimum budget_tokens
#: the thinking budget when none is given: half the output limit, at most this
DEFAULT_THINKING_BUDGET = 16000


class AnthropicProposer(ModelProposer):
    provider = "anthropic"

    def __init__(self, model: str, options: ProviderOptions | None = None, **wiring: Any):
        """``model`` asked as ``options`` say (``wiring``: as :class:`ModelProposer` takes it)."""
        options = options or ProviderOptions()
        thinking_budget, thinking, effort = options.thinking_budget, options.thinking, options.reasoning_effort
        if thinking_budget is not None and thinking_budget != 0:
            if thinking_budget < MIN_THINKING_BUDGET:
                raise InputError(f"anthropic: thinking_budget must be >= {MIN_THINKING_BUDGET} tokens "
                                 f"(the API's minimum), got {thinking_budget}")
            if thinking is not None:
                raise InputError(f"anthropic: give thinking_budget (manual extended thinking) or thinking="
                                 f"{thinking!r}, not both")
        if thinking is not None and thinking not in THINKING_MODES:
            raise InputError(f"anthropic: thinking must be one of {', '.join(THINKING_MODES)}, got {thinking!r}")
        if effort is not None and effort not in EFFORTS:
            raise InputError(f"anthropic: reasoning effort (output_config.effort) must be one of "
                             f"{', '.join(EFFORTS)}, got {effort!r}")
        self.thinking_budget = int(thinking_budget) if thinking_budget else None
        self.thinking = thinking
        super().__init__(model, options, **wiring)
        self._sdk = import_sdk("anthropic", SDK_REQUIREMENT)
        self._sdk_error = self._sdk.AnthropicError
        key = self._api_key(wiring.get("api_key"), "ANTHROPIC_API_KEY",
                            missing="no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key",
                            hint="export ANTHROPIC_API_KEY=sk-ant-...  (or use --base-url for a local "
                                 "Anthropic-compatible server that needs no key)")
        self._client = self._sdk.Anthropic(api_key=key, base_url=self.base_url, timeout=self._timeout(),
                                           max_retries=0)
        self._tool = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                      "input_schema": proposal_schema()}

    # -- what the table makes of the settings ------------------------------------------------
    def _resolve(self, max_tokens: int | None) -> None:
        caps, modes = self.caps, set(self.caps.thinking_modes)
        adaptive_ok = bool({"adaptive", "always"} & modes)
        want = "budget" if self.thinking_budget else ("off" if self.thinking == "disabled" else self.thinking)
        if want is None:                                      # thinking on by default, where the model has it
            want = "adaptive" if adaptive_ok else ("budget" if "budget" in modes else "off")
        if want == "off" and "always" in modes:
            self.adjustments.append(f"thinking 'disabled' asked, but {caps.key} always thinks: adaptive thinking sent")
            want = "adaptive"
        if want == "adaptive" and not adaptive_ok:
            if "budget" in modes:
                self.adjustments.append(f"{caps.key} has no adaptive thinking: a thinking budget sent instead")
                want = "budget"
            elif caps.known:
                self.adjustments.append(f"{caps.key} does not think: no thinking sent")
                want = "off"
        if want == "budget" and "budget" not in modes and caps.known:
            if adaptive_ok:
                self.adjustments.append(f"{caps.key} takes no thinking budget: adaptive thinking sent instead")
                want = "adaptive"
            else:
                self.adjustments.append(f"{caps.key} does not think: no thinking sent")
                want = "off"
        self.thinking_on = want in ("adaptive", "budget")
        limit = int(max_tokens) if max_tokens is not None else caps.default_output(self.thinking_on)
        limit = min(limit, caps.max_output) if caps.known else limit
        self.thinking_body: dict | None = None
        if want == "adaptive":
            self.thinking_body = {"type": "adaptive"}
        elif want == "budget":
            budget = self.thinking_budget or min(DEFAULT_THINKING_BUDGET, limit // 2)
            if self.thinking_budget and limit <= budget:       # the budget comes on top of a kernel's room
                limit = min(budget + (int(max_tokens) if max_tokens else caps.default_output(False)),
                            caps.max_output if caps.known else budget * 2 + 16000)
            if budget >= limit or budget < MIN_THINKING_BUDGET:
                raise InputError(f"anthropic: a thinking budget of {budget} tokens does not fit the output limit "
                                 f"of {limit} tokens ({caps.key} allows {caps.max_output}); budget_tokens must "
                                 f"be >= {MIN_THINKING_BUDGET} and below max_tokens",
                                 hint="raise --max-output-tokens or lower --thinking-budget")
            self.thinking_budget = budget
            self.thinking_body = {"type": "enabled", "budget_tokens": budget}
        elif self.thinking == "disabled":
            off = caps.thinking_off or ("disabled" if not caps.known else None)
            self.thinking_body = {"type": off} if off else None
        self.max_tokens = limit
        wanted = self.reasoning_effort or (DEFAULT_EFFORT if self.thinking_on else None)
        self.effort = caps.best_effort(wanted) if caps.effort else (self.reasoning_effort if not caps.known else None)
        if self.reasoning_effort and self.effort != self.reasoning_effort:
            self.adjustments.append(f"effort {self.reasoning_effort!r} asked; {caps.key} takes "
                                    f"{', '.join(caps.effort) or 'no effort'}: "
                                    + (f"{self.effort!r} sent" if self.effort else "none sent"))
        self._resolve_temperature()

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        def cache(ttl: str | None = None) -> dict:
            if not plan.on:
                return {}
            return {"cache_control": {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}}

        def static_cache() -> dict:      # the run's part: a breakpoint only where it clears the minimum alone
            return cache(plan.static_ttl) if plan.static_on else {}

        rest = plan.rest(index)
        blocks: list[dict] = []
        if plan.static:
            blocks.append({"type": "text", "text": plan.static, **static_cache()})
        if plan.common:
            blocks.append({"type": "text", "text": plan.common, **cache()})
        content: Any = blocks + [{"type": "text", "text": rest}] if blocks else rest
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens,
                                "messages": [{"role": "user", "content": content}]}
        system = self.system_text(request.system)
        if system:
            # with no static prefix, the system prompt is the run's part: the breakpoint goes there
            body["system"] = [{"type": "text", "text": system, **(static_cache() if not plan.static else {})}]
        if self.answer_format == "tool":
            forced = self.caps.forced_tool_ok(self.thinking_on)
            choice = {"type": "tool", "name": TOOL_NAME} if forced else {"type": "auto"}
            body["tools"] = [copy.deepcopy(self._tool)]
            body["tool_choice"] = {**choice, "disable_parallel_tool_use": True}
        if self.thinking_body is not None:
            body["thinking"] = dict(self.thinking_body)
        if self.effort is not None:
            body["output_config"] = {"effort": self.effort}
        if self.send_temperature:
            body["temperature"] = self.temperature
        if self.stream:
            body["stream"] = True
        return body

    def _with_limit(self, body: dict, limit: int) -> dict | None:
        """``body`` asking for ``limit`` output tokens; a thinking budget lowered below it (to half of
        it), or None where that leaves less than the API's minimum budget."""
        new = super()._with_limit(body, limit)
        thinking = new.get("thinking") or {}
        if thinking.get("type") == "enabled" and thinking.get("budget_tokens", 0) >= limit:
            if limit // 2 < MIN_THINKING_BUDGET:
                return None
            new["thinking"] = {**thinking, "budget_tokens": limit // 2}
        return new

    def _send(self, body: dict, on_start: Callable[[], None], progress: Progress) -> Any:
        kwargs = copy.deepcopy(body)
        stream = kwargs.pop("stream", False)
        # fields some SDK releases have no argument for (this one has no temperature) go as extra body
        extra = {k: kwargs.pop(k) for k in ("temperature", "output_config") if k in kwargs}
        if stream:
            with self._client.messages.stream(**kwargs, extra_body=extra or None) as answer:
                progress.started = True       # HTTP 200: from here on the input is billed
                stopped = False
                try:
                    try:
                        for event in answer:
                            on_start()        # the answer has begun: the cache it writes can be read
                            kind = getattr(event, "type", None)
                            stopped = stopped or kind == "message_stop"
                            delta = getattr(event, "delta", None) if kind == "content_block_delta" else None
                            if delta is not None:
                                progress.chars += len(getattr(delta, "text", None) or getattr(delta, "thinking", None)
                                                      or getattr(delta, "partial_json", None) or "")
                    finally:                  # the usage of message_start / message_delta received so far
                        try:
                            progress.usage = self._usage(answer.current_message_snapshot)
                        except AssertionError:        # no message_start came
                            pass
                    if not stopped:           # the connection closed before message_stop: a dropped answer
                        raise MidStreamError("the stream ended before message_stop (the connection dropped "
                                             "mid-answer)", transient=True, dropped=True)
                    return answer.get_final_message()
                except (self._sdk_error, MidStreamError):
                    raise
                except ASSEMBLY_ERRORS as exc:
                    raise StreamAssemblyError(f"{type(exc).__name__}: {exc}") from exc
        message = self._client.messages.create(**kwargs, extra_body=extra or None,
                                               timeout=self._request_timeout(body))
        on_start()
        return message

    def _usage(self, response: Any) -> Usage:
        usage = getattr(response, "usage", None)
        if usage is None:
            return Usage(reasoning_reported=False)
        written = as_count(getattr(usage, "cache_creation_input_tokens", 0))
        by_ttl = getattr(usage, "cache_creation", None)
        hour = min(written, as_count(getattr(by_ttl, "ephemeral_1h_input_tokens", 0))) if by_ttl is not None else 0
        details = getattr(usage, "output_tokens_details", None)
        return Usage(input=as_count(getattr(usage, "input_tokens", 0)),
                     output=as_count(getattr(usage, "output_tokens", 0)),
                     reasoning=as_count(getattr(details, "thinking_tokens", 0)) if details is not None else 0,
                     reasoning_reported=details is not None,
                     cache_read=as_count(getattr(usage, "cache_read_input_tokens", 0)),
                     cache_write=written - hour, cache_write_long=hour)

    def _truncated(self, response: Any) -> bool:
        return getattr(response, "stop_reason", None) == "max_tokens"

    def _stop_text(self, response: Any) -> str:
        return f"stop_reason={getattr(response, 'stop_reason', None)}"

    def _refusal(self, response: Any) -> str | None:
        """A stop no repair can mend: the model declined (``refusal``) or the conversation filled the
        context window (``model_context_window_exceeded``)."""
        stop = getattr(response, "stop_reason", None)
        if stop == "refusal":
            return "the model declined to answer (stop_reason=refusal)"
        if stop == "model_context_window_exceeded":
            return "the conversation filled the model's context window (stop_reason=model_context_window_exceeded)"
        return None

    def _text(self, response: Any) -> str:
        blocks = list(getattr(response, "content", None) or [])
        return "\n".join(getattr(b, "text", "") or "" for b in blocks if getattr(b, "type", None) == "text")

    def _tool_args(self, response: Any) -> tuple[bool, object, str | None]:
        blocks = list(getattr(response, "content", None) or [])
        use = next((b for b in blocks if getattr(b, "type", None) == "tool_use"
                    and getattr(b, "name", None) == TOOL_NAME), None)
        if use is None:
            return False, None, None
        return True, getattr(use, "input", None), None

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

    def _conversation_body(self, body: dict, system: str, messages: list[dict]) -> dict:
        new = {k: copy.deepcopy(v) for k, v in body.items() if k not in ("tools", "tool_choice", "system", "messages")}
        if system:
            new["system"] = [{"type": "text", "text": system}]
        new["messages"] = [{"role": m["role"], "content": m["content"]} for m in messages]
        return new

    def _relaxations(self) -> list[Relaxation]:
        budget = self.thinking_budget or min(DEFAULT_THINKING_BUDGET, max(MIN_THINKING_BUDGET, self.max_tokens // 2))
        return [
            WITHOUT_TEMPERATURE,
            Relaxation("forced_tool_choice", sent=lambda b: b.get("tool_choice", {}).get("type") in ("tool", "any"),
                       named=lambda m: bool(re.search(r"tool_choice|forc\w* tool|tool use", m)),
                       apply=_auto_tool_choice,
                       note="sent again with tool_choice auto"),
            Relaxation("manual_thinking", sent=lambda b: b.get("thinking", {}).get("type") == "enabled",
                       named=lambda m: "thinking.type.enabled" in m or "budget_tokens" in m
                       or ("thinking" in m and "adaptive" in m),
                       apply=_adaptive_thinking,
                       note="sent again with adaptive thinking instead of a thinking budget"),
            Relaxation("adaptive_thinking", sent=lambda b: b.get("thinking", {}).get("type") == "adaptive",
                       named=lambda m: "adaptive" in m and "thinking" in m,
                       apply=lambda b: _budget_thinking(b, budget, self.caps.max_output),
                       note="sent again with a thinking budget instead of adaptive thinking"),
            Relaxation("thinking_off", sent=lambda b: b.get("thinking", {}).get("type") in ("disabled", "between_tools"),
                       named=lambda m: "thinking" in m and ("disabled" in m or "between_tools" in m),
                       apply=lambda b: {**copy.deepcopy(b), "thinking": {"type": "adaptive"}},
                       note="sent again with adaptive thinking (the model does not turn thinking off)"),
            Relaxation("effort", sent=lambda b: "output_config" in b,
                       named=lambda m: "effort" in m or "output_config" in m,
                       apply=lambda b: {k: v for k, v in b.items() if k != "output_config"},
                       note="sent again without output_config.effort"),
        ]


def _auto_tool_choice(body: dict) -> dict:
    new = copy.deepcopy(body)
    new["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
    return new


def _adaptive_thinking(body: dict) -> dict:
    new = copy.deepcopy(body)
    new["thinking"] = {"type": "adaptive"}
    if "tool_choice" in new:
        new["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
    return new


def _budget_thinking(body: dict, budget: int, max_output: int) -> dict:
    """``body`` with a thinking budget instead of adaptive thinking: the budget below the output
    limit; a limit with no room for the least budget is raised to twice it, never above the
    model's maximum (``max_output``)."""
    new = copy.deepcopy(body)
    limit = as_count(new.get("max_tokens")) or max_output
    if limit <= MIN_THINKING_BUDGET:
        limit = min(2 * MIN_THINKING_BUDGET, max_output)
    budget = max(MIN_THINKING_BUDGET, min(budget, limit - 1))
    new["thinking"] = {"type": "enabled", "budget_tokens": budget}
    new["max_tokens"] = limit
    if "tool_choice" in new:
        new["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
    return new
