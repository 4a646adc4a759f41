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
Each API's wire format is its own module (:mod:`.openai_responses`, :mod:`.openai_chat`), and what
a request may be sent again without is :mod:`.openai_relaxations`.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from kernel_forge.common.errors import InputError
from kernel_forge.common.reads import nesting_problem
from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.openai_chat import ChatApi
from kernel_forge.proposers.openai_relaxations import LIMIT_FIELDS, relaxations
from kernel_forge.proposers.openai_responses import ResponsesApi, input_parts
from kernel_forge.proposers.options import ProviderOptions, choices
from kernel_forge.proposers.provider import DEFAULT_EFFORT, ModelProposer
from kernel_forge.proposers.relaxation import Relaxation
from kernel_forge.proposers.retry import Failure
from kernel_forge.proposers.proposal_schema import TOOL_DESCRIPTION, TOOL_NAME, proposal_schema
from kernel_forge.proposers.transport import EmptyStream, as_count, import_sdk
from kernel_forge.proposers.usage import Progress, Usage

#: the openai SDK releases kforge is tested with (pyproject.toml says the same)
SDK_REQUIREMENT = "openai>=3.60,<4"
EFFORTS = choices("reasoning_effort")


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
        #: the API's wire format: bodies, streams, answers, repair turns
        self.wire = ResponsesApi(self) if self.api == "responses" else ChatApi(self)
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

    # -- hooks: each the API's wire format ----------------------------------------------------
    def _initial_body(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        return self.wire.body(request, index, plan)

    def _input_parts(self, plan: CachePlan, index: int) -> list[dict]:
        """A Responses request's user message parts (:func:`.openai_responses.input_parts`)."""
        return input_parts(self.caps.cache, plan, index)

    def _send(self, body: dict, on_start: Callable[[], None], progress: Progress) -> Any:
        return self.wire.send(body, on_start, progress)

    def _classify(self, exc: BaseException) -> Failure | None:
        if isinstance(exc, EmptyStream):
            return Failure(retryable=True, description=f"empty answer: {exc}", kind="dropped")
        return super()._classify(exc)

    def _usage(self, response: Any) -> Usage:
        usage = getattr(response, "usage", None)
        if usage is None:
            return Usage(reasoning_reported=False)
        total_field, in_details, out_details, output_field = self.wire.usage_fields
        total = as_count(getattr(usage, total_field, 0))
        idetails = getattr(usage, in_details, None)
        odetails = getattr(usage, out_details, None)
        output = as_count(getattr(usage, output_field, 0))
        reasoning = as_count(getattr(odetails, "reasoning_tokens", 0)) if odetails is not None else 0
        cached = min(total, as_count(getattr(idetails, "cached_tokens", 0))) if idetails is not None else 0
        written = min(total - cached, as_count(getattr(idetails, "cache_write_tokens", 0))) if idetails is not None else 0
        ttl = getattr(idetails, "cache_write_tokens_details", None) if idetails is not None else None
        long = min(written, as_count(getattr(ttl, "ttl_12h_tokens", 0))) if ttl is not None else 0
        return Usage(input=total - cached - written, output=output, reasoning=reasoning,
                     reasoning_reported=odetails is not None and getattr(odetails, "reasoning_tokens", None) is not None,
                     cache_read=cached, cache_write=written - long, cache_write_long=long)

    def _truncated(self, response: Any) -> bool:
        return self.wire.truncated(response)

    def _refusal(self, response: Any) -> str | None:
        """A stop no repair can mend: a content filter, an answer that is a refusal, or (Responses) an
        incomplete answer for any reason but its output limit (which the truncation retry handles)."""
        return self.wire.refusal(response)

    def _stop_text(self, response: Any) -> str:
        return self.wire.stop_text(response)

    def _text(self, response: Any) -> str:
        return self.wire.text(response)

    def _tool_args(self, response: Any) -> tuple[bool, object, str | None]:
        call = self.wire.function_call(response)
        if call is None:
            return False, None, None
        raw = self.wire.arguments(call)
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
        return self.wire.repair(body, response, problem)

    def _add_user_text(self, body: dict, text: str) -> dict:
        return self.wire.add_user_text(body, text)

    def _conversation_body(self, body: dict, system: str, messages: list[dict]) -> dict:
        drop = ("tools", "tool_choice", "parallel_tool_calls", "instructions", "input", "messages")
        new = {k: copy.deepcopy(v) for k, v in body.items() if k not in drop}
        return self.wire.conversation_body(new, system, messages)

    def _relaxations(self) -> list[Relaxation]:
        return relaxations()
