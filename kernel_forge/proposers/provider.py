"""The one base of the model-backed proposers (:class:`ModelProposer`): the machinery the two
providers (:mod:`.anthropic_provider`, :mod:`.openai_provider`) share: the settings resolved
against the capability table, the fan-out over a request's proposals, the context window.  Its
parts live beside it: the provider registry and specs (:mod:`.models`), the options
(:mod:`.options`), one proposal's conversation and its follow-ups (:mod:`.conversation`), one call
on the wire with its retries, budget and record (:mod:`.exchange`), the cache plan
(:mod:`.cache_plan`), relaxations (:mod:`.relaxation`), the answer format (:mod:`.reading`), token
counts (:mod:`.usage`) and the SDK helpers (:mod:`.transport`).

Every request is built from the model's entry in the capability table
(:mod:`.capabilities`): thinking on where the model has it (adaptive, or a budget where that is
all it takes), the highest effort asked for that it accepts, an output limit with room for the
thinking and a whole kernel, a temperature only where it is accepted.  The answer comes as text
(:mod:`.answer`: the kernel in a fenced block, or search/replace edits against its parent, and a
small JSON part), or, with ``answer_format="tool"``, as a ``submit_kernel`` tool call.

Each proposal is its own conversation, built from ``request.static_prefix`` and
``request.prompt_for(i)``; then at most one of each follow-up, every one a new request:

* a **repair** turn when the answer is unusable (no kernel, edits that do not apply, a JSON part
  that is wrong), quoting the problem;
* a **truncation** retry when the answer was cut off at the output limit: twice the limit up to
  ``max_tokens_cap`` (by default the model's own maximum), or, at the cap, the same conversation
  asking for a shorter answer;
* a **relaxed** request after an HTTP 400 that names an optional parameter the model rejects (a
  model the table does not know, or a table entry gone stale): sent again without it, and
  remembered for this model for the rest of the run.

The ``n`` proposals of a request share a prompt prefix (the run's static part, then the sections
every proposal of the iteration has): one request goes first, and the others start once its
answer has begun, so that they read the prompt cache it wrote (and a relaxation it needed is
learned once, not by every parallel request).  The prefix is cached where the model caches
(Anthropic ``cache_control`` breakpoints with a 1-hour lifetime on the run's part when
iterations take longer than 5 minutes; OpenAI ``prompt_cache_key``), or marked off in the
evidence when it is under the model's minimum.

``budget`` (a shared :class:`~.budget.Budget`) is checked before every call against that call's
worst case.  What still fails becomes a string in :attr:`ProposalResult.errors`, never an
exception.  Every request (transport retries included) becomes one :class:`ModelCall` with the
body sent, the body received, the provider's token counts (reasoning and cache reads/writes
apart), cost, seconds, attempts, timeouts, the table entry used and how the request was built.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.proposers.base import ModelCall, ProposalRequest, ProposalResult
from kernel_forge.proposers.budget import Budget, estimate_tokens
from kernel_forge.proposers.cache_plan import CachePlan, plan_cache, static_ttl
from kernel_forge.proposers.capabilities import Capabilities
from kernel_forge.proposers.capabilities import for_model as capabilities_for
from kernel_forge.proposers.context import MIN_OUTPUT, ContextRefused, cut
from kernel_forge.proposers.conversation import Conversation
from kernel_forge.proposers.options import ProviderOptions, choices
from kernel_forge.proposers.pricing import PriceTable, price_table
from kernel_forge.proposers.reading import Reading, read_proposal, repair_text, shorter_text, system_text
from kernel_forge.proposers.relaxation import Learned, Relaxation
from kernel_forge.proposers.retry import MIDSTREAM, TRANSIENT_ERRORS, Failure, RetryPolicy, classify_exception, error_type
from kernel_forge.proposers.transport import (CONNECT_TIMEOUT, LOCAL_CONNECT_ATTEMPTS, NO_KEY,
                                              NONSTREAMING_SECONDS_PER_TOKEN, StreamAssemblyError, as_count,
                                              is_local_url)
from kernel_forge.proposers.usage import Progress, Usage, price_of

#: effort asked for when none is configured: every model that takes an effort takes this one
DEFAULT_EFFORT = "high"
ANSWER_FORMATS = choices("answer_format")
CACHE_TTLS = choices("cache_ttl")


@dataclass
class TextReply:
    """What :meth:`ModelProposer.ask` got: the answer's text, or why there is none."""

    text: str
    calls: list[ModelCall] = field(default_factory=list)   # every call it took (relaxed and truncated ones too)
    error: str | None = None                                # why there is no answer (the figures of a budget refusal)
    budget_exhausted: bool = False                          # a call was refused by the budget, before it was made
    truncated: bool = False                                 # the answer was cut off at the output limit again


class ModelProposer:
    """Base of the two providers: capabilities, fan-out over ``n`` (one first, then the rest),
    caching plan, budget checks, retries, repair, truncation and relaxation follow-ups, ModelCall
    records.

    Subclasses set ``provider`` and ``_sdk_error`` and implement ``_initial_body``, ``_send``,
    ``_usage``, ``_text``, ``_tool_args``, ``_truncated``, ``_repair_body``, ``_add_user_text``,
    ``_conversation_body`` and ``_relaxations``; ``_limit_field`` names the body field holding the output limit."""

    provider = ""
    needs_prompt = True

    def __init__(self, model: str, options: ProviderOptions | None = None, *, api_key: str | None = None,
                 prices: PriceTable | Mapping[str, object] | None = None, budget: Budget | None = None,
                 capabilities: Capabilities | None = None, sleep: Callable[[float], None] | None = None,
                 retry: RetryPolicy | None = None, parallel: int = 4, clock: Callable[[], float] | None = None):
        """``model`` asked as ``options`` say; ``api_key`` (default: the provider's variable),
        ``prices`` (overrides of the table), a shared ``budget``; ``capabilities``, ``sleep``,
        ``retry``, ``parallel`` and ``clock`` replace the table entry, the waits between retries, the
        retry policy, the fan-out and the clock (tests)."""
        options = options or ProviderOptions()
        max_tokens, timeout = options.max_tokens, options.request_timeout_s
        if not model or not isinstance(model, str):
            raise InputError(f"{self.provider}: a model name is required")
        if max_tokens is not None and max_tokens < 1:
            raise InputError(f"{self.provider}: max_tokens must be >= 1, got {max_tokens}")
        if timeout is None or not timeout > 0:
            raise InputError(f"{self.provider}: the request timeout must be > 0 seconds, got {timeout}")
        if options.answer_format not in ANSWER_FORMATS:
            raise InputError(f"{self.provider}: answer_format must be one of {', '.join(ANSWER_FORMATS)}, "
                             f"got {options.answer_format!r}")
        if options.cache_ttl not in CACHE_TTLS:
            raise InputError(f"{self.provider}: cache_ttl must be one of {', '.join(CACHE_TTLS)}, "
                             f"got {options.cache_ttl!r}")
        self.options = options
        base_url, context_tokens = options.base_url, options.context_tokens
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.base_url = base_url
        self.caps = capabilities or capabilities_for(self.provider, model, base_url=base_url, server=options.server)
        if context_tokens is not None:     # the served model's window (a local server the table cannot know)
            if int(context_tokens) < 1024:
                raise InputError(f"{self.provider}: --context-tokens must be >= 1024, got {context_tokens}")
            self.caps = dataclasses.replace(self.caps, context=int(context_tokens))
        self.temperature = options.temperature
        self.reasoning_effort = options.reasoning_effort
        self.answer_format = options.answer_format
        self.prompt_cache = bool(options.prompt_cache)
        self.cache_ttl = options.cache_ttl
        self.budget = budget
        self.timeout = float(timeout)
        self.stream = bool(options.stream)
        self.prices = price_table(prices)
        self.priced = self.prices.lookup(self.provider, model) is not None
        self.local = is_local_url(base_url)
        #: what the table made of the settings asked for (e.g. "thinking cannot be turned off")
        self.adjustments: list[str] = []
        self.thinking_on = False
        self._resolve(max_tokens)     # sets max_tokens, thinking settings (provider hook)
        # the model's own maximum binds where the table knows it; a local server's is the served model's
        authoritative = self.caps.known and self.caps.api != "chat"
        if options.max_tokens_cap is not None:
            cap = int(options.max_tokens_cap)
        else:   # the model's maximum; elsewhere up to four times the first limit
            cap = self.caps.max_output if authoritative else max(self.caps.max_output, 4 * self.max_tokens)
        self.max_tokens_cap = max(min(cap, self.caps.max_output) if authoritative else cap, self.max_tokens)
        if retry is None:
            retry = RetryPolicy(max_attempts=options.max_attempts, timeout_retries=options.timeout_retries,
                                connect_attempts=LOCAL_CONNECT_ATTEMPTS if self.local else None)
        if sleep is not None:
            retry = dataclasses.replace(retry, sleep=sleep)
        self.retry = retry
        self.parallel = max(1, int(parallel))
        self._secrets: tuple[str, ...] = ()
        self.learned = Learned()
        self._local = threading.local()
        self._clock = clock or time.monotonic
        self._last_propose: float | None = None
        #: seconds between the last two requests (an iteration's length): picks the cache lifetime
        self.interval: float | None = None
        self._primed = False          # a request of this run has been answered (relaxations learned)

    def _resolve(self, max_tokens: int | None) -> None:
        """Thinking, effort and the output limit from the table and the settings (provider hook)."""
        self.max_tokens = int(max_tokens) if max_tokens is not None else self.caps.default_output(False)

    #: what this provider calls thinking, in the adjustments it records
    thinking_word = "thinking"

    def _resolve_temperature(self) -> None:
        """Send the temperature asked for only where the model takes one (thinking as resolved)."""
        caps = self.caps
        if self.temperature is not None and not caps.accepts_temperature(self.thinking_on):
            self.adjustments.append(f"{caps.key} takes no temperature"
                                    + (f" with {self.thinking_word} on" if caps.temperature == "without_thinking"
                                       else "") + ": none sent")
            self.send_temperature = False
        else:
            self.send_temperature = self.temperature is not None

    def _api_key(self, api_key: str | None, env: str, *, missing: str, hint: str) -> str:
        """The key given, else ``$env``; with neither, :data:`NO_KEY` for a server given with a base
        URL (it may need none) and an :class:`EnvironmentProblem` (``missing``, ``hint``) for the
        provider's own.  A real key is kept to be scrubbed from what is recorded."""
        key = api_key if api_key is not None else os.environ.get(env)
        if not key:
            if self.base_url is None:
                raise EnvironmentProblem(missing, hint=hint)
            key = NO_KEY
        self._secrets = (key,) if key != NO_KEY else ()
        return key

    def _timeout(self):
        """The SDK timeout: ``self.timeout`` for the request (between chunks when streamed), a
        shorter bound on opening the connection."""
        make = getattr(self._sdk, "Timeout", None)
        if make is None:
            return self.timeout
        return make(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT))

    def _output_room(self, body: dict) -> int:
        """The most output tokens ``body`` may ask for: the model's context less its input (an
        over-estimate), so a longer answer never asks for the whole context (a local server's
        32,768 tokens, say) and leaves its own prompt no room."""
        return max(1, self.caps.context - estimate_tokens(body))

    def _request_timeout(self, body: dict):
        """The timeout of one request: a streamed answer keeps the client's (``self.timeout``
        between chunks); a whole answer waited for at once gets as long as ``max_tokens`` takes at
        the Anthropic SDK's own reckoning (an hour per 128,000 output tokens, so 15 minutes for
        32,000), never less than ``self.timeout``."""
        if body.get("stream"):
            return self._timeout()
        limit = as_count(body.get(self._limit_field(body))) or self.max_tokens
        seconds = max(self.timeout, NONSTREAMING_SECONDS_PER_TOKEN * limit)
        make = getattr(self._sdk, "Timeout", None)
        return make(seconds, connect=min(seconds, CONNECT_TIMEOUT)) if make is not None else seconds

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict: raise NotImplementedError
    def _send(self, body: dict, on_start: Callable[[], None], progress: Progress) -> Any: raise NotImplementedError
    def _usage(self, response: Any) -> Usage: raise NotImplementedError
    def _text(self, response: Any) -> str: raise NotImplementedError
    def _tool_args(self, response: Any) -> tuple[bool, object, str | None]: return False, None, None
    def _truncated(self, response: Any) -> bool: raise NotImplementedError
    def _repair_body(self, body: dict, response: Any, problem: str) -> dict: raise NotImplementedError
    def _add_user_text(self, body: dict, text: str) -> dict: raise NotImplementedError
    def _conversation_body(self, body: dict, system: str, messages: list[dict]) -> dict: raise NotImplementedError
    def _relaxations(self) -> list[Relaxation]: return []
    def _limit_field(self, body: dict) -> str: return "max_tokens"
    def _stop_text(self, response: Any) -> str: return ""
    def _refusal(self, response: Any) -> str | None: return None

    #: the SDK's base exception class (set by subclasses once the SDK is imported)
    _sdk_error: type | tuple = ()

    def _classify(self, exc: BaseException) -> Failure | None:
        """Retryable transport/status failures; any other SDK error fails without retry."""
        if isinstance(exc, StreamAssemblyError):
            return Failure(retryable=False, description=f"the streamed answer could not be assembled: {exc}")
        failure = classify_exception(exc)
        if failure is None and self._sdk_error and isinstance(exc, self._sdk_error):
            body = getattr(exc, "body", None)
            kind = error_type(body)
            if kind is not None:     # an error chunk inside a stream (Chat Completions): retried where it passes
                failure = Failure(retryable=kind in TRANSIENT_ERRORS, description=f"error in the stream: {kind}: {exc}",
                                  body=body if isinstance(body, dict) else None, kind=MIDSTREAM)
            else:
                failure = Failure(retryable=False, description=f"{type(exc).__name__}: {exc}")
        return failure
    @property
    def relaxed(self) -> set[str]:
        """Names of the relaxations this model needed: applied to every later request of the run."""
        return self.learned.names

    # -- the answer format ------------------------------------------------------------------
    def system_text(self, system: str) -> str:
        """The system prompt as sent (in tool mode its answer-format section says to call the tool)."""
        return system_text(system, self.answer_format)

    def repair_text(self, problem: str) -> str:
        return repair_text(problem, self.answer_format)

    def shorter_text(self, limit: int) -> str:
        return shorter_text(limit, self.answer_format)

    def _read(self, response: Any, parent: str | None) -> Reading:
        """The proposal in an answer: the tool call in tool mode (a fenced answer accepted too),
        else the text in the answer format."""
        tool = self._tool_args(response) if self.answer_format == "tool" else (False, None, None)
        return read_proposal(self.answer_format, tool, self._text(response), self._stop_text(response), parent)

    # -- the caching plan -------------------------------------------------------------------
    def _plan(self, request: ProposalRequest, n: int) -> CachePlan:
        ttl = static_ttl(self.caps, self.cache_ttl, self.interval)
        return plan_cache(request, n, system=self.system_text(request.system), name=self.name, caps=self.caps,
                          prompt_cache=self.prompt_cache, static_ttl=ttl)

    # -- the protocol -----------------------------------------------------------------------
    def propose(self, request: ProposalRequest) -> ProposalResult:
        n = max(0, int(request.n))
        result = ProposalResult()
        if n == 0:
            return result
        now = self._clock()
        if self._last_propose is not None:
            self.interval = now - self._last_propose
        self._last_propose = now
        plan = self._plan(request, n)
        if n == 1:
            outs = [self._one(request, 0, 1, plan)]
        else:
            # one request first: the others start once its answer has begun, so they read the cache it
            # wrote; on a run's first request, a parameter the model rejects is learned once
            wait_first = plan.on or not self._primed
            with ThreadPoolExecutor(max_workers=min(n, self.parallel),
                                    thread_name_prefix=f"kforge-{self.provider}") as pool:
                if wait_first:
                    started = threading.Event()
                    first = pool.submit(self._one, request, 0, n, plan, started)
                    started.wait()
                    futures = [first] + [pool.submit(self._one, request, i, n, plan) for i in range(1, n)]
                else:
                    futures = [pool.submit(self._one, request, i, n, plan) for i in range(n)]
                outs = [f.result() for f in futures]
        connect_failed: list[bool] = []
        for out in outs:
            first_call = len(result.calls)
            result.calls.extend(out.calls)
            connect_failed.extend(out.connect_failed)
            if out.proposal is not None:
                out.proposal.calls = list(range(first_call, len(result.calls)))
                result.proposals.append(out.proposal)
            if out.error is not None:
                result.errors.append(out.error)
            result.budget_exhausted = result.budget_exhausted or out.budget
        result.unreachable = bool(connect_failed) and all(connect_failed)
        self._primed = self._primed or any(c.response is not None and c.error is None for c in result.calls)
        return result

    def _initial(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        return self.learned.apply(self._initial_body(request, index, plan), self._relaxations())

    def _worst_case(self, body: dict) -> tuple[float, int, int]:
        """(usd, input tokens estimated, output limit) of the most ``body`` can cost."""
        tokens_in = estimate_tokens(body)
        limit = as_count(body.get(self._limit_field(body))) or self.max_tokens
        return self.prices.worst_case(self.provider, self.model, tokens_in, limit).usd, tokens_in, limit

    def _reserve(self, body: dict, where: str):
        if self.budget is None or not self.priced:
            return None
        usd, tokens_in, limit = self._worst_case(body)
        return self.budget.reserve(usd, f"the next call of {where} ({self.name}: about {tokens_in} input "
                                        f"tokens, up to {limit} output tokens)")

    # -- the context window -----------------------------------------------------------------
    #: what cutting the prompt did, for the calls of the conversation being built (per thread)
    @property
    def _cut_note(self) -> dict | None:
        return getattr(self._local, "cut", None)

    def _with_limit(self, body: dict, limit: int) -> dict | None:
        """``body`` asking for ``limit`` output tokens (provider hook: None where it cannot, e.g. a
        thinking budget with no room)."""
        new = copy.deepcopy(body)
        new[self._limit_field(body)] = limit
        return new

    def _fit_output(self, body: dict, where: str) -> tuple[dict, dict | None]:
        """``body`` as it fits the context window: unchanged, or with its output limit lowered to the
        room left (at least :data:`MIN_OUTPUT`); :class:`ContextRefused` otherwise."""
        window = self.caps.context
        tokens_in = estimate_tokens(body)
        limit = as_count(body.get(self._limit_field(body))) or self.max_tokens
        if tokens_in + limit <= window:
            return body, None
        least = min(MIN_OUTPUT, limit)
        room = window - tokens_in
        new = self._with_limit(body, room) if room >= least else None
        if new is None:
            dropped = (self._cut_note or {}).get("dropped") or []
            raise ContextRefused(
                f"{where}: the prompt is about {tokens_in} tokens (its request body at 3 characters a token) and "
                f"the answer needs at least {least} output tokens, but {self.caps.key}'s context window is "
                f"{window} tokens" + (f" (after dropping {', '.join(dropped)})" if dropped else "")
                + "; the call was not made (for a local server, --context-tokens N gives the served model's window; "
                  "else lower --history-in-prompt or --archive-chars)")
        return new, {"window": window, "prompt_tokens_estimate": tokens_in,
                     "output_limit_lowered": {"from": limit, "to": room}}

    def _fit_prompt(self, request: ProposalRequest, index: int, plan: CachePlan, where: str) -> dict:
        """Proposal ``index``'s first body, made to fit the window: its output limit lowered, else its
        prompt cut by rule (whole sections, lowest priority first: :mod:`.context`), else refused."""
        self._local.cut = None
        body = self._initial(request, index, plan)
        try:
            self._fit_output(body, where)
            return body
        except ContextRefused:
            pass
        # the whole user prompt: the droppable sections (the archive, the expert pattern) may sit in
        # the run's static part as well as in the iteration's
        whole = "\n\n".join(p for p in (plan.static, plan.common, plan.rest(index)) if p)
        tokens_in = estimate_tokens(body)
        limit = as_count(body.get(self._limit_field(body))) or self.max_tokens
        over = tokens_in + min(MIN_OUTPUT, limit) - self.caps.context
        # a character of text is at least a character of the JSON body: 3 characters a token over
        for chars in (3 * over + 3, len(whole)):
            trimmed, dropped = cut(whole, chars)
            if not dropped:
                break
            small = dataclasses.replace(plan, on=False, static_on=False, static_ttl=None, static="", common="",
                                        rests=[trimmed] * (index + 1),
                                        reason=plan.reason + "; off for this proposal: its prompt was cut to fit "
                                                             "the context window")
            body = self._initial(request, index, small)
            self._local.cut = {"window": self.caps.context, "prompt_tokens_before_cut": tokens_in,
                               "dropped": dropped}
            try:
                self._fit_output(body, where)
                return body
            except ContextRefused:
                continue
        return body          # refused by _answer's check, naming the sizes and what was dropped
    def _one(self, request: ProposalRequest, index: int, n: int, plan: CachePlan,
             started: threading.Event | None = None) -> Conversation:
        """Proposal ``index`` of ``n``: its conversation (``started`` is set once its answer has begun)."""
        conv = Conversation(self, f"{self.name}: proposal {index + 1} of {n}", plan,
                            started.set if started is not None else (lambda: None))
        conv.propose(request, index)
        return conv

    # -- a free-text conversation -----------------------------------------------------------
    def ask(self, system: str, messages: list[dict], what: str = "a text answer") -> TextReply:
        """One conversation that is not a proposal (``kforge init --describe``): ``messages``
        ([{"role": "user" | "assistant", "content": text}, ...], ending with the user's turn) under
        ``system``, in a request built as a proposal's is (the capability table's thinking, effort,
        output limit and temperature; relaxations learned earlier in the run), with no tool offered.
        The budget is checked before every call; an answer cut off at the output limit is asked
        again with twice the limit (up to the cap).  Failures come back in :class:`TextReply`."""
        if not messages or messages[-1].get("role") != "user":
            raise InputError(f"{self.name}: a conversation ends with the user's turn")
        request = ProposalRequest(system=system, prompt=str(messages[0].get("content", "")))
        plan = self._plan(request, 1)
        self._local.cut = None
        body = self._conversation_body(self._initial(request, 0, plan), system, messages)
        out = Conversation(self, f"{self.name}: {what}", plan)
        got = out.answer(body, shorter=False)
        self._primed = self._primed or got is not None
        for call in out.calls:
            if call.plan is not None:
                call.plan["answer_format"] = "text"        # a free answer, not a proposal's format
        cut = got is None and bool(out.calls) and (out.calls[-1].error or "").startswith("truncated")
        return TextReply(text=self._text(got[0]).strip() if got is not None else "", calls=out.calls,
                         error=out.error, budget_exhausted=out.budget, truncated=cut)

    def _plan_json(self, plan: CachePlan, body: dict) -> dict:
        return {"answer_format": self.answer_format, "thinking": self.thinking_on,
                "output_limit": as_count(body.get(self._limit_field(body))) or self.max_tokens,
                "cache": plan.to_json(), "adjustments": list(self.adjustments)}
    def _price(self, usage: Usage) -> float:
        """The USD of ``usage``; an estimated one at the worst case (every input token at the dearest rate)."""
        return price_of(self.prices, self.provider, self.model, usage)
