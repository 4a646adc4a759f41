"""The one base of the model-backed proposers (:class:`ModelProposer`): the machinery the two
providers (:mod:`.anthropic_provider`, :mod:`.openai_provider`) share.  Specs and the factory are
in :mod:`.models`.

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
import hashlib
import ipaddress
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.proposers.answer import read_answer
from kernel_forge.proposers.base import ModelCall, Proposal, ProposalRequest, ProposalResult
from kernel_forge.proposers.budget import Budget, BudgetRefused, estimate_tokens
from kernel_forge.proposers.capabilities import Capabilities
from kernel_forge.proposers.capabilities import for_model as capabilities_for
from kernel_forge.proposers.context import MIN_OUTPUT, ContextRefused, cut
from kernel_forge.proposers.options import ProviderOptions, choices
from kernel_forge.proposers.pricing import PriceTable, price_table
from kernel_forge.proposers.retry import CONNECT, MIDSTREAM, TIMEOUT, TRANSIENT_ERRORS, Failure, RetryPolicy, call_with_retry, classify_exception, error_type
from kernel_forge.proposers.schema import TOOL_NAME, ProposalSchemaError, check_proposal, to_proposal
from kernel_forge.common.scrub import scrub

# ---------------------------------------------------------------- shared provider machinery

#: connection attempts while a local server (localhost, a private address) cannot be reached
LOCAL_CONNECT_ATTEMPTS = 2
#: seconds allowed to open a connection (the request timeout bounds the rest)
CONNECT_TIMEOUT = 10.0
#: a non-streamed answer's time per output token: the anthropic SDK's estimate (an hour for
#: 128,000 tokens, _base_client._calculate_nonstreaming_timeout), used for both providers
NONSTREAMING_SECONDS_PER_TOKEN = 3600 / 128_000
#: characters per token when sizing a prompt prefix against a cache minimum (a rough mean for
#: the mix of prose and code in kforge prompts; the table's minimums are in the provider's tokens)
PREFIX_CHARS_PER_TOKEN = 3.5
#: effort asked for when none is configured: every model that takes an effort takes this one
DEFAULT_EFFORT = "high"
#: seconds of the short cache lifetimes, by name
TTL_SECONDS = {"5m": 300, "1h": 3600, "30m": 1800, "12h": 43200}
ANSWER_FORMATS = choices("answer_format")
CACHE_TTLS = choices("cache_ttl")
#: the API key sent to a server given with a base URL when none is set (local servers take any)
NO_KEY = "not-needed"


def is_local_url(base_url: str | None) -> bool:
    """``base_url`` points at this machine or a private network (a local model server)."""
    if not base_url:
        return False
    host = (urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_unspecified


@dataclass
class Reading:
    """What a provider made of one answer."""

    args: dict | None = None          # the proposal's arguments (source, rationale, launch, ...)
    problem: str | None = None        # why the answer is unusable (None: usable)
    rationale_prefix: str = ""        # "[from text]" when a tool answer came as a fenced block


@dataclass
class Usage:
    """Token counts of one answer, split the way the providers bill them."""

    input: int = 0                    # input tokens billed at the plain rate (not cached)
    output: int = 0                   # output tokens, reasoning included
    reasoning: int = 0                # of output: reasoning / thinking
    cache_read: int = 0
    cache_write: int = 0              # short-lifetime (or unspecified) cache writes
    cache_write_long: int = 0         # long-lifetime writes (Anthropic 1 h, OpenAI 12 h)
    reasoning_reported: bool = True   # the provider's usage had a reasoning/thinking field
    estimated: bool = False           # counted by kforge (an attempt that failed before its usage came)

    @property
    def total_input(self) -> int:
        return self.input + self.cache_read + self.cache_write + self.cache_write_long


@dataclass
class Progress:
    """What one HTTP attempt received before it ended: whether the answer began (HTTP 200: from then
    on its input is billed), the usage the provider reported so far (Anthropic ``message_start`` /
    ``message_delta``, an OpenAI ``response.failed``), and the characters of output that arrived."""

    started: bool = False
    usage: Usage | None = None
    chars: int = 0


#: characters per output token when counting what a failed stream had sent (low: an over-count)
OUTPUT_CHARS_PER_TOKEN = 3.0


def billed_before_failure(progress: Progress, body: dict) -> Usage | None:
    """The tokens an attempt that failed after its answer began was billed for: the usage the
    provider reported so far (output at least what arrived, at a token per 3 characters), else its
    input estimated from the body (JSON characters / 3, an over-count) with that output, labelled
    ``estimated``.  None: the attempt failed before its answer began (HTTP 429/5xx bill nothing)."""
    if not progress.started:
        return None
    arrived = -(-progress.chars // int(OUTPUT_CHARS_PER_TOKEN)) if progress.chars else 0
    reported = progress.usage
    if reported is not None and reported.total_input > 0:
        if reported.output >= arrived:
            return reported
        return dataclasses.replace(reported, output=arrived, estimated=True)
    return Usage(input=estimate_tokens(body), output=arrived, reasoning_reported=False, estimated=True)


@dataclass(frozen=True)
class Relaxation:
    """An optional request parameter a model may reject with an HTTP 400 naming it."""

    name: str                                       # e.g. "temperature"
    sent: Callable[[dict], bool]                    # the body carries it
    named: Callable[[str], bool]                    # the (lower-cased) error message names it
    apply: Callable[[dict], dict]                   # the body without it
    note: str                                       # what was done, for the call's error text
    learn: bool = True                              # remember it for later requests of the run
    adapt: Callable[[dict, str], dict] | None = None  # apply, given the error message (e.g. the values it lists)


#: the relaxation both providers try first: a temperature the model does not take
WITHOUT_TEMPERATURE = Relaxation("temperature", sent=lambda b: "temperature" in b,
                                 named=lambda m: "temperature" in m,
                                 apply=lambda b: {k: v for k, v in b.items() if k != "temperature"},
                                 note="sent again without temperature")


@dataclass
class CachePlan:
    """How one request's prompt is split for the prompt cache, and whether caching is on."""

    on: bool
    reason: str
    static: str                        # the run's part (request.static_prefix)
    common: str                        # the leading sections every proposal of this request shares
    rests: list[str]                   # per proposal, what follows
    prefix_tokens: int                 # estimate of system + static + common, in tokens
    min_tokens: int | None
    static_ttl: str | None             # the lifetime asked for the run's part (None: the default)
    key: str                           # OpenAI prompt_cache_key
    static_tokens: int = 0             # estimate of system + static alone, in tokens
    #: the run's part is long enough to be cached on its own: its breakpoint is placed (a breakpoint
    #: under the model's minimum caches nothing, so none is placed, and the evidence says so)
    static_on: bool = False

    def rest(self, index: int) -> str:
        return self.rests[index] if index < len(self.rests) else (self.rests[0] if self.rests else "")

    def to_json(self) -> dict:
        return {"on": self.on, "reason": self.reason, "prefix_tokens_estimate": self.prefix_tokens,
                "min_tokens": self.min_tokens, "static_ttl": self.static_ttl,
                "shared_chars": len(self.static) + len(self.common),
                "static_tokens_estimate": self.static_tokens, "static_on": self.static_on}


def split_common(prompts: list[str]) -> tuple[str, list[str]]:
    """The leading ``# `` sections every prompt of ``prompts`` has (word for word), and each
    prompt's remainder.  One prompt alone shares nothing."""
    if len(prompts) < 2:
        return "", list(prompts)
    parts = [re.split(r"(?=\n\n# )", p) for p in prompts]
    shared = 0
    while all(len(p) > shared + 1 for p in parts) and all(p[shared] == parts[0][shared] for p in parts):
        shared += 1
    common = "".join(parts[0][:shared])
    return common, ["".join(p[shared:]).lstrip("\n") for p in parts]


class StreamAssemblyError(Exception):
    """A streamed answer whose events the SDK could not assemble into a message (a server that
    strays from the wire format); recorded as a failed call, not retried."""


#: what assembling a sloppy stream can raise (the HTTP library's and the SDKs' errors are not among them)
ASSEMBLY_ERRORS = (ValueError, KeyError, IndexError, TypeError, AttributeError, AssertionError)


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def import_sdk(name: str, requirement: str):
    """Import an SDK (a dependency, imported only when a proposer is built) or explain."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EnvironmentProblem(
            f"the {name!r} package is needed for {name}:MODEL proposers but cannot be imported ({exc})",
            hint=f"pip install '{requirement}'   (it is a dependency of cuda-kernel-forge: reinstall it)",
        ) from None


def dump_response(obj: Any) -> dict | None:
    """The SDK response object as the JSON body it was built from."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj
    # warnings=False: a body that strays from the SDK's types (a local server) is recorded as is
    for attempt in (lambda: obj.model_dump(mode="json", exclude_unset=True, warnings=False),
                    lambda: obj.model_dump(mode="json", exclude_unset=True),
                    lambda: obj.to_dict(),
                    lambda: dict(obj)):
        try:
            return attempt()
        except Exception:  # noqa: BLE001 - try the next way
            continue
    return {"repr": repr(obj)}


@dataclass
class _Conversation:
    """What one proposal's conversation produced."""

    proposal: Proposal | None = None
    calls: list[ModelCall] = field(default_factory=list)
    error: str | None = None
    connect_failed: list[bool] = field(default_factory=list)   # per call: no connection was made
    budget: bool = False                                        # a call was refused by the budget


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
    tool_repair = ("Call submit_kernel again with the complete corrected proposal: the full .cu source in "
                   "`source` and a short `rationale`; `launch` and `tunables` only if needed and valid.")
    text_repair = ("Answer again in the answer format: a few sentences, then the complete kernel in one ```cuda "
                   "block (or SEARCH/REPLACE edits against the kernel this proposal builds on in one ```diff "
                   "block), then one ```json block with launch, tunables, direction, technique and "
                   "predicted_speedup where they apply.")

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
        #: names of relaxations this model needed: applied to every later request of the run
        self.relaxed: set[str] = set()
        self._relaxed_bodies: dict[str, Callable[[dict], dict]] = {}
        self._lock = threading.Lock()
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
        limit = _int(body.get(self._limit_field(body))) or self.max_tokens
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

    def system_text(self, system: str) -> str:
        """The system prompt as sent: in tool mode, its answer-format section says to call the tool."""
        if self.answer_format != "tool" or not system:
            return system
        head, sep, _ = system.partition(ANSWER_FORMAT_HEADING)
        tool = ("Answer format: call the `submit_kernel` tool once, with the complete .cu file in `source`, "
                "a rationale of a few sentences, and `launch`, `tunables`, `direction`, `technique` and "
                "`predicted_speedup` where they apply.")
        return (head.rstrip() + "\n\n" + tool + "\n") if sep else system

    # -- the caching plan -------------------------------------------------------------------
    def _plan(self, request: ProposalRequest, n: int) -> CachePlan:
        prompts = [request.prompt_for(i) for i in range(n)]
        common, rests = split_common(prompts)
        system = self.system_text(request.system)
        chars = len(system) + len(request.static_prefix) + len(common)
        tokens = int(chars / PREFIX_CHARS_PER_TOKEN)
        static_tokens = int((len(system) + len(request.static_prefix)) / PREFIX_CHARS_PER_TOKEN)
        minimum = self.caps.min_cache_tokens
        key = "kforge-" + hashlib.sha256((self.name + "\0" + system + "\0" + request.static_prefix)
                                         .encode("utf-8")).hexdigest()[:24]
        if not self.prompt_cache:
            on, reason = False, "prompt caching turned off (--no-prompt-cache)"
        elif self.caps.cache == "none" or minimum is None:
            on, reason = False, f"{self.caps.key} has no prompt cache kforge can use"
        elif tokens < minimum:
            on, reason = False, (f"the shared prefix is about {tokens} tokens, under {self.caps.key}'s minimum "
                                 f"cacheable prompt of {minimum}")
        else:
            on, reason = True, f"the shared prefix is about {tokens} tokens (minimum {minimum})"
        # the run's part has a breakpoint of its own only where it clears the minimum by itself
        static_on = on and static_tokens >= (minimum or 0)
        if on and not static_on:
            reason += (f"; the run's part alone is about {static_tokens} tokens, under the minimum: no breakpoint "
                       "of its own (the shared prefix's breakpoint caches it within each iteration)")
        return CachePlan(on=on, reason=reason, static=request.static_prefix, common=common, rests=rests,
                         prefix_tokens=tokens, min_tokens=minimum,
                         static_ttl=self._static_ttl() if static_on else None, key=key,
                         static_tokens=static_tokens, static_on=static_on)

    def _static_ttl(self) -> str | None:
        """The cache lifetime for the run's part of the prompt: the long one when asked, or (auto)
        when the last iteration took longer than the short one lasts; None: the default."""
        ttls = self.caps.cache_ttls
        if len(ttls) < 2 or self.cache_ttl == "short":
            return None
        if self.cache_ttl == "long":
            return ttls[-1]
        short = TTL_SECONDS.get(ttls[0], 300)
        if self.interval is not None and self.interval > short - 30:
            return ttls[-1]
        return None

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

    def repair_text(self, problem: str) -> str:
        if self.answer_format == "tool":
            return f"The submit_kernel call was rejected: {problem}. {self.tool_repair}"
        return f"Your answer could not be used: {problem}. {self.text_repair}"

    def shorter_text(self, limit: int) -> str:
        how = ("call submit_kernel once with the complete kernel source and a rationale of a few sentences"
               if self.answer_format == "tool" else
               "give the kernel (or SEARCH/REPLACE edits) and the ```json part, with a rationale of a few sentences")
        return (f"Your previous answer was cut off at the output limit ({limit} tokens) before it was "
                f"complete. Answer again so that it fits: think briefly, then {how}.")

    def _initial(self, request: ProposalRequest, index: int, plan: CachePlan) -> dict:
        body = self._initial_body(request, index, plan)
        with self._lock:
            relaxed = dict(self._relaxed_bodies)
        for r in self._relaxations():
            if r.name in relaxed and r.sent(body):
                body = relaxed[r.name](body)
        return body

    def _relaxation_for(self, failure: Failure | None, body: dict, used: set[str]) -> Relaxation | None:
        if failure is None or failure.status != 400:
            return None
        message = failure.message.lower()
        for r in self._relaxations():
            if r.name not in used and r.sent(body) and r.named(message):
                return r
        return None

    def _worst_case(self, body: dict) -> tuple[float, int, int]:
        """(usd, input tokens estimated, output limit) of the most ``body`` can cost."""
        tokens_in = estimate_tokens(body)
        limit = _int(body.get(self._limit_field(body))) or self.max_tokens
        return self.prices.worst_case(self.provider, self.model, tokens_in, limit).usd, tokens_in, limit

    def _reserve(self, body: dict, where: str):
        if self.budget is None or not self.priced:
            return None
        usd, tokens_in, limit = self._worst_case(body)
        return self.budget.reserve(usd, f"the next call of {where} ({self.name}: about {tokens_in} input "
                                        f"tokens, up to {limit} output tokens)")

    def _answer(self, body: dict, where: str, used: set[str], out: _Conversation, plan: CachePlan,
                on_start: Callable[[], None], shorter: bool = True) -> tuple[Any, dict] | None:
        """Send ``body`` until an answer comes that was not cut off: the budget checked before every
        call against its worst case, a relaxed request after an HTTP 400 naming an optional parameter,
        one truncation follow-up per conversation (``used``: the follow-ups already spent; at the cap
        a shorter answer is asked for where ``shorter``).  Returns the answer and the body that got it,
        or None with ``out.error`` (and ``out.budget``) set; every call goes to ``out.calls``."""
        while True:
            try:
                body, fitted = self._fit_output(body, where)
            except ContextRefused as exc:
                out.error = scrub(str(exc), self._secrets)
                return None
            try:
                reservation = self._reserve(body, where)
            except BudgetRefused as exc:
                out.error, out.budget = f"{where}: {exc}", True
                return None
            call, response, failure = self._exchange(body, on_start, reservation, plan)
            if call.plan is not None and (fitted or self._cut_note):
                call.plan["context"] = {**(self._cut_note or {}), **(fitted or {})}
            out.calls.append(call)
            out.connect_failed.append(response is None and failure is not None and failure.kind == CONNECT)
            if response is not None:
                refused = self._refusal(response)
                if refused is not None:      # not a bad answer: a repair or a retry would be paid for the same
                    call.error = scrub(f"not answered: {refused}; recorded as a failed call (no repair asked)",
                                       self._secrets)
                    out.error = scrub(f"{where}: {call.error}", self._secrets)
                    return None
            if response is None:
                relax = self._relaxation_for(failure, body, used)
                if relax is not None:
                    used.add(relax.name)
                    message = failure.message if failure is not None else ""
                    new_body = relax.adapt(body, message) if relax.adapt is not None else relax.apply(body)
                    if relax.learn:
                        with self._lock:
                            self.relaxed.add(relax.name)
                            fixed = _diff_fields(body, new_body)
                            self._relaxed_bodies[relax.name] = lambda b, f=fixed: _patch(b, f)
                    call.error = scrub(f"{call.error} -- {relax.note}, for this model for the rest of the run",
                                       self._secrets)
                    body = new_body
                    continue
                out.error = f"{where}: request failed after {call.attempts} attempt(s): {call.error}"
                out.budget = out.budget or (failure is not None and failure.kind == "budget")
                return None
            if not self._truncated(response):
                return response, body
            key = self._limit_field(body)
            limit = _int(body.get(key)) or self.max_tokens
            at_cap = limit >= self.max_tokens_cap or self._output_room(body) <= limit
            if "truncation" in used or (at_cap and not shorter):
                again = "again" if "truncation" in used else "the cap"
                call.error = f"truncated: the answer was cut off at the output limit ({limit} tokens) {again}"
                out.error = scrub(f"{where}: {call.error.removeprefix('truncated: ')}", self._secrets)
                return None
            used.add("truncation")
            room = self._output_room(body)
            at_cap = at_cap or room <= limit
            if not at_cap:
                new_limit = min(self.max_tokens_cap, 2 * limit, room)
                call.error = (f"truncated: the answer was cut off at the output limit ({limit} tokens); "
                              f"asked again with {key}={new_limit}")
                body = copy.deepcopy(body)
                body[key] = new_limit
            else:
                call.error = (f"truncated: the answer was cut off at the output limit ({limit} tokens, the "
                              "cap); asked again for a shorter answer")
                body = self._add_user_text(body, self.shorter_text(limit))

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
        limit = _int(body.get(self._limit_field(body))) or self.max_tokens
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
        limit = _int(body.get(self._limit_field(body))) or self.max_tokens
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
             started: threading.Event | None = None) -> _Conversation:
        where = f"{self.name}: proposal {index + 1} of {n}"
        out = _Conversation()
        on_start = started.set if started is not None else (lambda: None)
        try:
            try:
                body = self._fit_prompt(request, index, plan, where)
            except ContextRefused as exc:
                out.error = scrub(str(exc), self._secrets)
                return out
            parent = request.parent_for(index)
            used: set[str] = set()           # follow-ups already spent: repair, truncation, relaxations
            while True:
                got = self._answer(body, where, used, out, plan, on_start)
                if got is None:
                    return out
                response, body = got
                reading = self._read(response, parent)
                if reading.problem is None and reading.args is not None:
                    try:
                        proposal = to_proposal(reading.args, proposer=self.name,
                                               rationale_prefix=reading.rationale_prefix)
                    except ProposalSchemaError as exc:   # _read should have caught it; be safe
                        reading.problem = str(exc)
                    else:
                        if index < len(request.directions):
                            proposal.direction = request.directions[index]
                        out.proposal = proposal
                        return out
                problem = reading.problem or "no usable answer"
                out.calls[-1].error = scrub(f"invalid answer: {problem}", self._secrets)
                if "repair" in used:
                    out.error = scrub(f"{where}: answer still invalid after one repair request: {problem}",
                                      self._secrets)
                    return out
                used.add("repair")
                body = self._repair_body(body, response, problem)
        finally:
            on_start()      # the others go ahead even when the first fails

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
        out = _Conversation()
        got = self._answer(body, f"{self.name}: {what}", set(), out, plan, lambda: None, shorter=False)
        self._primed = self._primed or got is not None
        for call in out.calls:
            if call.plan is not None:
                call.plan["answer_format"] = "text"        # a free answer, not a proposal's format
        cut = got is None and bool(out.calls) and (out.calls[-1].error or "").startswith("truncated")
        return TextReply(text=self._text(got[0]).strip() if got is not None else "", calls=out.calls,
                         error=out.error, budget_exhausted=out.budget, truncated=cut)

    def _read(self, response: Any, parent: str | None) -> Reading:
        """The proposal in an answer: the tool call in tool mode (a fenced answer accepted too),
        else the text in the answer format."""
        if self.answer_format == "tool":
            found, args, problem = self._tool_args(response)
            if found:
                if problem is not None:
                    return Reading(problem=problem)
                return Reading(args=args if isinstance(args, dict) else None, problem=check_proposal(args))
        text = self._text(response)
        answer = read_answer(text, parent)
        if answer.problem is not None:
            stop = self._stop_text(response)
            if self.answer_format == "tool" and "no ```cuda block" in answer.problem:
                return Reading(problem=f"the answer held no {TOOL_NAME} tool call and no fenced CUDA block "
                                       f"with a __global__ function ({stop})")
            return Reading(problem=answer.problem + (f" ({stop})" if stop else ""))
        prefix = "[from text]" if self.answer_format == "tool" else ""
        return Reading(args=answer.args, problem=check_proposal(answer.args), rationale_prefix=prefix)

    def _plan_json(self, plan: CachePlan, body: dict) -> dict:
        return {"answer_format": self.answer_format, "thinking": self.thinking_on,
                "output_limit": _int(body.get(self._limit_field(body))) or self.max_tokens,
                "cache": plan.to_json(), "adjustments": list(self.adjustments)}

    def _exchange(self, body: dict, on_start: Callable[[], None], reservation=None,
                  plan: CachePlan | None = None) -> tuple[ModelCall, Any, Failure | None]:
        sent = copy.deepcopy(body)
        start = time.monotonic()
        billed: list[Usage] = []         # what attempts that failed after their answer began were billed
        held = {"reservation": reservation, "settled": 0.0, "first": reservation}

        def attempt():
            if billed and held["reservation"] is not None:
                # a retry after a billed failure: what was billed is spent, and the retry must fit what
                # is left at its own worst case (a budget bounds retries too)
                cost = sum(self._price(u) for u in billed) - held["settled"]
                self.budget.settle(held["reservation"], cost)
                held["settled"] += cost
                held["reservation"] = None
                held["reservation"] = self.budget.reserve(self._worst_case(body)[0],
                                                          f"a retry after a failure mid-answer ({self.name})")
            progress = Progress()
            try:
                return self._send(body, on_start, progress)
            except Exception:
                got = billed_before_failure(progress, body)
                if got is not None:
                    billed.append(got)
                raise

        def classify(exc: BaseException) -> Failure | None:
            if isinstance(exc, BudgetRefused):
                return Failure(retryable=False, description=str(exc), kind="budget")
            return self._classify(exc)

        try:
            outcome = call_with_retry(attempt, self.retry, classify=classify)
        except BaseException:
            if self.budget is not None and held["reservation"] is not None:
                self.budget.settle(held["reservation"], sum(self._price(u) for u in billed) - held["settled"])
            raise
        seconds = time.monotonic() - start
        response_obj = outcome.value if outcome.ok else None
        failure = outcome.failure
        if outcome.ok:
            received = dump_response(response_obj)
            usage = self._usage(response_obj)
            error = None
        else:
            received = failure.body if failure is not None and isinstance(failure.body, dict) else None
            usage = Usage()
            error = failure.description if failure is not None else repr(outcome.error)
            if failure is not None and failure.kind == TIMEOUT:
                error = f"{error} (timed out {outcome.timeouts} time(s) at {self.timeout:g} s)"
        usd = self._price(usage) + sum(self._price(u) for u in billed)
        for u in billed:                 # the tokens of failed attempts count with the answer's
            usage = Usage(input=usage.input + u.input, output=usage.output + u.output,
                          reasoning=usage.reasoning + u.reasoning, cache_read=usage.cache_read + u.cache_read,
                          cache_write=usage.cache_write + u.cache_write,
                          cache_write_long=usage.cache_write_long + u.cache_write_long,
                          reasoning_reported=usage.reasoning_reported and u.reasoning_reported,
                          estimated=usage.estimated or u.estimated)
        if self.budget is not None and (held["reservation"] is not None or usd - held["settled"]):
            self.budget.settle(held["reservation"], usd - held["settled"])
        plan_json = self._plan_json(plan, body) if plan is not None else None
        if plan_json is not None and reservation is not None:
            plan_json["budget_reserved_usd"] = round(reservation.usd, 6)
        call = ModelCall(provider=self.provider, model=self.model, request=sent, response=received,
                         input_tokens=usage.total_input, output_tokens=usage.output, cost_usd=usd,
                         seconds=round(seconds, 6), error=error,
                         attempts=max(1, outcome.attempts - (failure is not None and failure.kind == "budget")),
                         reasoning_tokens=usage.reasoning, cache_read_tokens=usage.cache_read,
                         cache_write_tokens=usage.cache_write + usage.cache_write_long,
                         cache_write_long_tokens=usage.cache_write_long, timeouts=outcome.timeouts,
                         reasoning_reported=usage.reasoning_reported, capability=self.caps.key, plan=plan_json,
                         usage_estimated=usage.estimated, billed_failed_attempts=len(billed))
        return scrub(call, self._secrets), response_obj, failure

    def _price(self, usage: Usage) -> float:
        """The USD of ``usage``; an estimated one at the worst case (every input token at the dearest rate)."""
        if usage.estimated:
            return self.prices.worst_case(self.provider, self.model, usage.total_input, usage.output).usd
        return self.prices.cost(self.provider, self.model, usage.input, usage.output,
                                cache_read_tokens=usage.cache_read, cache_write_tokens=usage.cache_write,
                                cache_write_long_tokens=usage.cache_write_long).usd


#: the heading that starts the answer-format section of prompts/system.md
ANSWER_FORMAT_HEADING = "Answer format:"


def _diff_fields(old: dict, new: dict) -> dict:
    """Top-level fields a relaxation changed or removed (removed: a marker)."""
    out = {}
    for k in set(old) | set(new):
        if k not in new:
            out[k] = _REMOVED
        elif old.get(k) != new[k]:
            out[k] = copy.deepcopy(new[k])
    return out


_REMOVED = object()


def _patch(body: dict, fields: dict) -> dict:
    new = copy.deepcopy(body)
    for k, v in fields.items():
        if v is _REMOVED:
            new.pop(k, None)
        elif k in new or k not in ("messages", "input"):
            new[k] = copy.deepcopy(v)
    return new
