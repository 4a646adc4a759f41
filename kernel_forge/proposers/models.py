"""Model-backed proposers: ``"anthropic:MODEL"`` / ``"openai:MODEL"`` specs, the machinery the two
providers share, and :func:`scrub`, which removes credentials before anything is written.

Each proposal is its own conversation, built from ``request.static_prefix`` and
``request.prompt_for(i)``: one request offering the ``submit_kernel`` tool, then at most one of
each follow-up, every one a new request (never the same one again):

* a **repair** turn when the answer is malformed (no tool call, arguments that are not JSON or
  fail the schema), quoting the problem;
* a **truncation** retry when the answer was cut off at the output limit (``stop_reason ==
  "max_tokens"`` / ``finish_reason == "length"``): twice the limit up to ``max_tokens_cap``, or,
  at the cap, the same conversation asking for a shorter answer;
* a **relaxed** request after an HTTP 400 that names an optional parameter the model rejects
  (a temperature, a forced ``tool_choice``, ...): sent again without it, and remembered for this
  model for the rest of the run.

What still fails becomes a string in :attr:`ProposalResult.errors`, never an exception.  Every
request (transport retries included) becomes one :class:`ModelCall` with the body sent, the body
received (a streamed answer as the SDK assembled it), tokens (reasoning and cache tokens apart),
cost, seconds, attempts and timeouts; each :class:`Proposal` lists the indices of its calls.
"""
from __future__ import annotations

import copy
import dataclasses
import re
import time
from collections.abc import Callable, Mapping
import ipaddress
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import EnvironmentProblem, InputError
from .base import ModelCall, Proposal, ProposalRequest, ProposalResult
from .pricing import PriceTable, price_table
from .retry import CONNECT, TIMEOUT, Failure, RetryPolicy, call_with_retry, classify_exception
from .schema import ProposalSchemaError, to_proposal

PROVIDERS = ("anthropic", "openai")
ACCEPTED_FORMS = (
    "anthropic:MODEL (e.g. anthropic:claude-sonnet-4-5; key from ANTHROPIC_API_KEY)",
    "openai:MODEL (e.g. openai:gpt-5; key from OPENAI_API_KEY; with a base URL also vLLM, "
    "Ollama or any OpenAI-compatible server, e.g. openai:qwen2.5-coder:32b)",
)

REDACTED = "[REDACTED]"

# Mapping keys whose values are credentials, compared lower-case with '-' read as '_'.
_SECRET_KEYS = frozenset({
    "api_key", "apikey", "x_api_key", "authorization", "proxy_authorization", "auth_token",
    "access_token", "refresh_token", "id_token", "client_secret", "secret_key", "password",
    "anthropic_api_key", "openai_api_key", "anthropic_auth_token", "x_goog_api_key", "api_token",
})
_SECRET_PATTERNS = (
    # Anthropic (sk-ant-...) and OpenAI (sk-..., sk-proj-...) style keys
    (re.compile(r"(?<![A-Za-z0-9])sk-(?:ant-)?[A-Za-z0-9_\-]{16,}"), REDACTED),
    # a bearer token quoted in some error text
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 " + REDACTED),
)


def _is_secret_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    k = key.strip().lower().replace("-", "_")
    return k in _SECRET_KEYS or k.endswith("_api_key")


def _scrub_text(text: str, secrets: tuple[str, ...]) -> str:
    for s in secrets:
        if s and s in text:
            text = text.replace(s, REDACTED)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def scrub(obj: Any, secrets: tuple[str, ...] | list[str] = ()) -> Any:
    """A copy of ``obj`` (nested dicts, lists, tuples, strings, dataclasses) with credentials
    replaced by ``[REDACTED]``: values under keys such as ``api_key``, ``x-api-key`` or
    ``Authorization``; substrings that look like ``sk-...`` / ``sk-ant-...`` keys or
    ``Bearer`` tokens; and any exact string in ``secrets`` (e.g. a local server's key that
    matches no pattern).  ``obj`` itself is not modified."""
    secrets = tuple(s for s in secrets if isinstance(s, str) and len(s) >= 4)
    return _scrub(obj, secrets)


def _scrub(obj: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(obj, str):
        return _scrub_text(obj, secrets)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            key = _scrub_text(k, secrets) if isinstance(k, str) else k
            out[key] = REDACTED if (_is_secret_key(k) and v not in (None, "")) else _scrub(v, secrets)
        return out
    if isinstance(obj, list):
        return [_scrub(v, secrets) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_scrub(v, secrets) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _scrub(getattr(obj, f.name), secrets) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``"openai:qwen2.5-coder:32b"`` -> ``("openai", "qwen2.5-coder:32b")`` (split at the first
    colon); anything else raises :class:`InputError` listing the accepted forms."""
    accepted = "accepted forms: " + "; ".join(ACCEPTED_FORMS)
    if not isinstance(spec, str) or ":" not in spec:
        raise InputError(f"model spec {spec!r} names no provider", hint=accepted)
    provider, _, model = spec.strip().partition(":")
    provider, model = provider.strip().lower(), model.strip()
    if provider not in PROVIDERS:
        raise InputError(f"model spec {spec!r}: unknown provider {provider!r}", hint=accepted)
    if not model:
        raise InputError(f"model spec {spec!r} names no model", hint=accepted)
    return provider, model


#: keyword arguments only one provider's proposer takes; make_model_proposer drops them for the other
PROVIDER_ONLY = {"anthropic": frozenset({"thinking_budget", "thinking", "prompt_cache"}),
                 "openai": frozenset({"max_tokens_field"})}


def make_model_proposer(spec: str, *, base_url: str | None = None,
                        prices: PriceTable | Mapping[str, object] | None = None, **kw: Any):
    """Build an :class:`AnthropicProposer` or :class:`OpenAIProposer` from ``"provider:MODEL"``.
    ``kw`` goes to the proposer (api_key, max_tokens, temperature, timeout, max_attempts, stream,
    reasoning_effort, ...); the other provider's own options (``thinking_budget``,
    ``max_tokens_field`` ...) are dropped, so one set of options serves an ensemble."""
    provider, model = parse_model_spec(spec)
    other = PROVIDER_ONLY["openai" if provider == "anthropic" else "anthropic"]
    kw = {k: v for k, v in kw.items() if k not in other}
    if provider == "anthropic":
        from .anthropic_provider import AnthropicProposer
        return AnthropicProposer(model, base_url=base_url, prices=prices, **kw)
    from .openai_provider import OpenAIProposer
    return OpenAIProposer(model, base_url=base_url, prices=prices, **kw)


# ---------------------------------------------------------------- shared provider machinery

#: connection attempts while a local server (localhost, a private address) cannot be reached
LOCAL_CONNECT_ATTEMPTS = 2
#: seconds allowed to open a connection (the request timeout bounds the rest)
CONNECT_TIMEOUT = 10.0


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

    args: dict | None = None          # the tool arguments, when they parsed as a JSON object
    problem: str | None = None        # why the answer is unusable (None: usable)
    rationale_prefix: str = ""        # "[from text]" when taken from a fenced block


@dataclass
class Usage:
    """Token counts of one answer, split the way the providers bill them."""

    input: int = 0                    # input tokens billed at the plain rate (not cached)
    output: int = 0                   # output tokens, reasoning included
    reasoning: int = 0                # of output: reasoning / thinking
    cache_read: int = 0
    cache_write: int = 0              # 5-minute (or unspecified) cache writes
    cache_write_1h: int = 0

    @property
    def total_input(self) -> int:
        return self.input + self.cache_read + self.cache_write + self.cache_write_1h


@dataclass(frozen=True)
class Relaxation:
    """An optional request parameter a model may reject with an HTTP 400 naming it."""

    name: str                                       # e.g. "temperature"
    sent: Callable[[dict], bool]                    # the body carries it
    named: Callable[[str], bool]                    # the (lower-cased) error message names it
    apply: Callable[[dict], dict]                   # the body without it
    note: str                                       # what was done, for the call's error text


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


class ModelProposer:
    """Base of the two providers: fan-out over ``n``, retries, repair, truncation and relaxation
    follow-ups, ModelCall records.

    Subclasses set ``provider`` and ``_sdk_error`` and implement ``_initial_body``, ``_send``,
    ``_usage``, ``_read``, ``_truncated``, ``_repair_body``, ``_add_user_text`` and
    ``_relaxations``; ``_limit_field`` names the body field holding the output limit."""

    provider = ""
    needs_prompt = True
    repair_instruction = ("Call submit_kernel again with the complete corrected proposal: the full .cu "
                          "source in `source` and a short `rationale`; `launch` and `tunables` only if "
                          "needed and valid.")

    def __init__(self, model: str, *, api_key: str | None, base_url: str | None, max_tokens: int,
                 temperature: float | None, timeout: float, max_attempts: int,
                 prices: PriceTable | Mapping[str, object] | None,
                 sleep: Callable[[float], None] | None = None, retry: RetryPolicy | None = None,
                 parallel: int = 4, stream: bool = True, max_tokens_cap: int | None = None,
                 timeout_retries: int = 2, reasoning_effort: str | None = None):
        if not model or not isinstance(model, str):
            raise InputError(f"{self.provider}: a model name is required")
        if max_tokens < 1:
            raise InputError(f"{self.provider}: max_tokens must be >= 1, got {max_tokens}")
        if timeout is None or not timeout > 0:
            raise InputError(f"{self.provider}: the request timeout must be > 0 seconds, got {timeout}")
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.base_url = base_url
        self.max_tokens = int(max_tokens)
        self.max_tokens_cap = max(int(max_tokens_cap or 4 * self.max_tokens), self.max_tokens)
        self.temperature = temperature
        self.reasoning_effort = reasoning_effort
        self.timeout = float(timeout)
        self.stream = bool(stream)
        self.prices = price_table(prices)
        self.priced = self.prices.lookup(self.provider, model) is not None
        self.local = is_local_url(base_url)
        if retry is None:
            retry = RetryPolicy(max_attempts=max_attempts, timeout_retries=timeout_retries,
                                connect_attempts=LOCAL_CONNECT_ATTEMPTS if self.local else None)
        if sleep is not None:
            retry = dataclasses.replace(retry, sleep=sleep)
        self.retry = retry
        self.parallel = max(1, int(parallel))
        self._secrets: tuple[str, ...] = ()
        #: names of relaxations this model needed: applied to every later request of the run
        self.relaxed: set[str] = set()
        self._lock = threading.Lock()

    def _timeout(self):
        """The SDK timeout: ``self.timeout`` for the request (between chunks when streamed), a
        shorter bound on opening the connection."""
        make = getattr(self._sdk, "Timeout", None)
        if make is None:
            return self.timeout
        return make(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT))

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest, index: int) -> dict: raise NotImplementedError
    def _send(self, body: dict) -> Any: raise NotImplementedError
    def _usage(self, response: Any) -> Usage: raise NotImplementedError
    def _read(self, response: Any) -> Reading: raise NotImplementedError
    def _truncated(self, response: Any) -> bool: raise NotImplementedError
    def _repair_body(self, body: dict, response: Any, problem: str) -> dict: raise NotImplementedError
    def _add_user_text(self, body: dict, text: str) -> dict: raise NotImplementedError
    def _relaxations(self) -> list[Relaxation]: return []
    def _limit_field(self, body: dict) -> str: return "max_tokens"

    #: the SDK's base exception class (set by subclasses once the SDK is imported)
    _sdk_error: type | tuple = ()

    def _classify(self, exc: BaseException) -> Failure | None:
        """Retryable transport/status failures; any other SDK error fails without retry."""
        if isinstance(exc, StreamAssemblyError):
            return Failure(retryable=False, description=f"the streamed answer could not be assembled: {exc}")
        failure = classify_exception(exc)
        if failure is None and self._sdk_error and isinstance(exc, self._sdk_error):
            failure = Failure(retryable=False, description=f"{type(exc).__name__}: {exc}")
        return failure

    # -- the protocol -----------------------------------------------------------------------
    def propose(self, request: ProposalRequest) -> ProposalResult:
        n = max(0, int(request.n))
        result = ProposalResult()
        if n == 0:
            return result
        if n == 1:
            outs = [self._one(request, 0, 1)]
        else:
            with ThreadPoolExecutor(max_workers=min(n, self.parallel),
                                    thread_name_prefix=f"kforge-{self.provider}") as pool:
                outs = list(pool.map(lambda i: self._one(request, i, n), range(n)))
        connect_failed: list[bool] = []
        for out in outs:
            first = len(result.calls)
            result.calls.extend(out.calls)
            connect_failed.extend(out.connect_failed)
            if out.proposal is not None:
                out.proposal.calls = list(range(first, len(result.calls)))
                result.proposals.append(out.proposal)
            if out.error is not None:
                result.errors.append(out.error)
        result.unreachable = bool(connect_failed) and all(connect_failed)
        return result

    def repair_text(self, problem: str) -> str:
        return f"The submit_kernel call was rejected: {problem}. {self.repair_instruction}"

    @staticmethod
    def shorter_text(limit: int) -> str:
        return (f"Your previous answer was cut off at the output limit ({limit} tokens) before it was "
                "complete. Answer again so that it fits: think briefly, then call submit_kernel once "
                "with the complete kernel source and a rationale of a few sentences.")

    def _initial(self, request: ProposalRequest, index: int) -> dict:
        body = self._initial_body(request, index)
        with self._lock:
            relaxed = set(self.relaxed)
        for r in self._relaxations():
            if r.name in relaxed and r.sent(body):
                body = r.apply(body)
        return body

    def _relaxation_for(self, failure: Failure | None, body: dict, used: set[str]) -> Relaxation | None:
        if failure is None or failure.status != 400:
            return None
        message = failure.message.lower()
        for r in self._relaxations():
            if r.name not in used and r.sent(body) and r.named(message):
                return r
        return None

    def _one(self, request: ProposalRequest, index: int, n: int) -> _Conversation:
        where = f"{self.name}: proposal {index + 1} of {n}"
        out = _Conversation()
        body = self._initial(request, index)
        used: set[str] = set()               # follow-ups already spent: repair, truncation, relaxations
        while True:
            call, response, failure = self._exchange(body)
            out.calls.append(call)
            out.connect_failed.append(response is None and failure is not None and failure.kind == CONNECT)
            if response is None:
                relax = self._relaxation_for(failure, body, used)
                if relax is not None:
                    used.add(relax.name)
                    with self._lock:
                        self.relaxed.add(relax.name)
                    call.error = scrub(f"{call.error} -- {relax.note}, for this model for the rest of the run",
                                       self._secrets)
                    body = relax.apply(body)
                    continue
                out.error = f"{where}: request failed after {call.attempts} attempt(s): {call.error}"
                return out
            key = self._limit_field(body)
            limit = _int(body.get(key)) or self.max_tokens
            if self._truncated(response):
                if "truncation" in used:
                    call.error = f"truncated: the answer was cut off at the output limit ({limit} tokens) again"
                    out.error = scrub(f"{where}: {call.error.removeprefix('truncated: ')}", self._secrets)
                    return out
                used.add("truncation")
                if limit < self.max_tokens_cap:
                    new_limit = min(self.max_tokens_cap, 2 * limit)
                    call.error = (f"truncated: the answer was cut off at the output limit ({limit} tokens); "
                                  f"asked again with {key}={new_limit}")
                    body = copy.deepcopy(body)
                    body[key] = new_limit
                else:
                    call.error = (f"truncated: the answer was cut off at the output limit ({limit} tokens, the "
                                  "cap); asked again for a shorter answer")
                    body = self._add_user_text(body, self.shorter_text(limit))
                continue
            reading = self._read(response)
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
            call.error = scrub(f"invalid answer: {problem}", self._secrets)
            if "repair" in used:
                out.error = scrub(f"{where}: answer still invalid after one repair request: {problem}",
                                  self._secrets)
                return out
            used.add("repair")
            body = self._repair_body(body, response, problem)

    def _exchange(self, body: dict) -> tuple[ModelCall, Any, Failure | None]:
        sent = copy.deepcopy(body)
        start = time.monotonic()
        outcome = call_with_retry(lambda: self._send(body), self.retry, classify=self._classify)
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
        priced = self.prices.cost(self.provider, self.model, usage.input, usage.output,
                                  cache_read_tokens=usage.cache_read, cache_write_tokens=usage.cache_write,
                                  cache_write_1h_tokens=usage.cache_write_1h)
        call = ModelCall(provider=self.provider, model=self.model, request=sent, response=received,
                         input_tokens=usage.total_input, output_tokens=usage.output, cost_usd=priced.usd,
                         seconds=round(seconds, 6), attempts=outcome.attempts, error=error,
                         reasoning_tokens=usage.reasoning, cache_read_tokens=usage.cache_read,
                         cache_write_tokens=usage.cache_write + usage.cache_write_1h,
                         timeouts=outcome.timeouts)
        return scrub(call, self._secrets), response_obj, failure


_FENCE = re.compile(r"```[ \t]*(cuda|cu|cpp|c\+\+|cxx|c)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_CODE_LANGS = {"cuda", "cu", "cpp", "c++", "cxx"}


def kernel_from_text(text: str) -> tuple[str, str] | None:
    """For servers that ignore tools: the first fenced ```cuda / ```cpp / ```c++ block holding a
    ``__global__`` function, and the rest of the text (the rationale); ``None`` if there is none."""
    if not text:
        return None
    for m in _FENCE.finditer(text):
        lang = (m.group(1) or "").lower()
        code = m.group(2)
        if lang in _CODE_LANGS and "__global__" in code:
            rest = (text[: m.start()] + text[m.end():]).strip()
            rest = re.sub(r"\n{3,}", "\n\n", rest)
            return code.rstrip() + "\n", rest
    return None
