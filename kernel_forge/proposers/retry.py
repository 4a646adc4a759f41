"""One retry policy for every model call.

Transient failures (HTTP 408, 429, 500, 502, 503, 504, 529, timeouts, dropped connections, and the
same failures reported *inside* a stream after HTTP 200: Anthropic's ``overloaded_error`` /
``api_error`` events, OpenAI's Responses ``error`` event and ``response.failed``, a Chat Completions
error chunk, a stream that ends before its last event -- :class:`MidStreamError`) are
retried with exponential backoff and jitter; a ``Retry-After`` header (seconds or an HTTP date)
or ``retry-after-ms`` is honoured instead of the backoff.  Every wait is capped at
``max_delay``.  Anything else (400, 401, 404 ...) fails at once.  Two kinds have their own, smaller
bounds: a timed-out request is tried again at most ``timeout_retries`` times (each timeout is
counted in :attr:`Outcome.timeouts`), and a connection that could not be made at all (refused,
DNS, unreachable: :data:`CONNECT`) at most ``connect_attempts`` times -- a local server that is
down does not answer on the fifth try either.

The SDK clients are built with ``max_retries=0`` so that this is the only policy in force and
:class:`Outcome.attempts` counts every HTTP attempt.  ``sleep`` (and ``random`` and ``now``) are
injectable so that tests run without waiting.
"""
from __future__ import annotations

import datetime
import email.utils
import random as _random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})

# Failure kinds
STATUS = "status"          # the server answered with an HTTP error
TIMEOUT = "timeout"        # no (complete) answer within the request timeout
CONNECT = "connect"        # no connection could be made: refused, DNS, unreachable, connect timeout
DROPPED = "dropped"        # the connection broke after it was made
MIDSTREAM = "midstream"    # the server reported an error inside the stream, after HTTP 200
OTHER = "other"

#: error types and codes (Anthropic ``error.type``, OpenAI ``error.type`` / ``code``) of a failure that
#: passes: the server was overloaded or failed, or a rate limit was hit, whether it came as an HTTP
#: status or inside a stream after HTTP 200
TRANSIENT_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error",
                              "server_error", "rate_limit_exceeded", "vector_store_timeout",
                              "internal_server_error", "service_unavailable", "overloaded"})


class MidStreamError(Exception):
    """An error that arrived inside a streamed answer, after HTTP 200 (``transient``: retried as an
    HTTP 429/5xx is), or a stream that ended before its last event (a dropped connection)."""

    def __init__(self, description: str, *, transient: bool, body: object | None = None, dropped: bool = False):
        super().__init__(description)
        self.description = description
        self.transient = transient
        self.body = body
        self.dropped = dropped


def error_type(body: object) -> str | None:
    """``error.type`` (else ``error.code``, ``type``, ``code``) of an error body, lower-cased."""
    if not isinstance(body, dict):
        return None
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    for key in ("type", "code"):
        value = inner.get(key)
        if isinstance(value, str) and value and value != "error":
            return value.lower()
    return None


@dataclass
class RetryPolicy:
    max_attempts: int = 5            # HTTP attempts in all, the first included
    timeout_retries: int = 2         # further attempts after a timeout (never more than max_attempts in all)
    connect_attempts: int | None = None  # attempts while no connection can be made (None: max_attempts)
    base_delay: float = 1.0          # first backoff, doubled per attempt
    max_delay: float = 60.0          # cap on any one wait, Retry-After included
    jitter: float = 0.25             # backoff is scaled by a factor in [1 - jitter, 1]
    sleep: Callable[[float], None] = time.sleep
    random: Callable[[], float] = _random.random
    now: Callable[[], float] = time.time   # wall clock, for Retry-After HTTP dates

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.timeout_retries < 0 or (self.connect_attempts is not None and self.connect_attempts < 1):
            raise ValueError("timeout_retries must be >= 0 and connect_attempts >= 1")
        if self.base_delay < 0 or self.max_delay < 0 or not 0 <= self.jitter <= 1:
            raise ValueError("base_delay and max_delay must be >= 0 and jitter within [0, 1]")

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based) when the server gave no hint."""
        raw = min(self.max_delay, self.base_delay * (2.0 ** (attempt - 1)))
        return max(0.0, raw * (1.0 - self.jitter * self.random()))

    def delay(self, attempt: int, headers: Mapping[str, str] | None) -> float:
        hinted = parse_retry_after(headers, now=self.now)
        if hinted is not None:
            return min(self.max_delay, hinted)
        return self.backoff(attempt)


@dataclass
class Failure:
    """How a failed attempt is to be treated."""

    retryable: bool
    description: str                         # e.g. "HTTP 429: rate limited", "timeout: ..."
    status: int | None = None
    headers: Mapping[str, str] | None = None
    body: object | None = None               # the error response's JSON body, if any
    kind: str = OTHER                        # STATUS | TIMEOUT | CONNECT | DROPPED | OTHER

    @property
    def message(self) -> str:
        """The provider's ``error.message`` (or the description) and ``error.param`` if any, for
        matching the names of rejected parameters."""
        text = _error_message(self.body) or self.description
        inner = self.body.get("error") if isinstance(self.body, dict) else None
        param = inner.get("param") if isinstance(inner, dict) else None
        return f"{text} (param: {param})" if isinstance(param, str) and param else text


@dataclass
class Outcome(Generic[T]):
    value: T | None = None
    error: BaseException | None = None
    failure: Failure | None = None           # the last failure (None on success)
    attempts: int = 0
    timeouts: int = 0                        # attempts that timed out
    delays: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    getter = getattr(headers, "get", None)
    if getter is None:
        return None
    value = getter(name)
    if value is None:                        # a plain dict: look case-insensitively
        lname = name.lower()
        for k, v in headers.items():
            if str(k).lower() == lname:
                return v
    return value


def parse_retry_after(headers: Mapping[str, str] | None, *,
                      now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait as the server asked: ``retry-after-ms`` (milliseconds), else
    ``Retry-After`` as seconds or as an HTTP date.  ``None`` if absent or unreadable; a date
    in the past gives 0."""
    if not headers:
        return None
    ms = _header(headers, "retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    text = _header(headers, "retry-after")
    if text is None:
        return None
    text = str(text).strip()
    try:
        value = float(text)
        return value if value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:                  # "-0000": UTC with no zone named
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - now())


def _error_message(body: object) -> str | None:
    """``error.message`` from either provider's error body."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from (the SDKs wrap the HTTP library's)."""
    out: list[BaseException] = []
    while exc is not None and exc not in out and len(out) < 8:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _names(exc: BaseException) -> list[str]:
    return [c.__name__ for c in type(exc).__mro__]


def classify_exception(exc: BaseException) -> Failure | None:
    """A provider-neutral classifier: anything with an integer ``status_code`` (both SDKs'
    ``APIStatusError``), timeouts and connection errors.  ``None``: not a call failure.

    A connection that was never made (the HTTP library's ``ConnectError`` / ``ConnectTimeout``
    under the SDK's ``APIConnectionError``) is :data:`CONNECT`; a timeout once connected is
    :data:`TIMEOUT`; a connection that broke (reset, closed mid-answer) is :data:`DROPPED`."""
    if isinstance(exc, MidStreamError):
        return Failure(retryable=exc.transient, description=exc.description,
                       body=exc.body if isinstance(exc.body, dict) else None,
                       kind=DROPPED if exc.dropped else MIDSTREAM)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool) and status < 400:
        # an error event inside a stream that began with HTTP 200 (the anthropic SDK raises it as a
        # status error of the stream's response): retried where its type is one that passes
        body = getattr(exc, "body", None)
        kind = error_type(body)
        message = _error_message(body) or getattr(exc, "message", None) or str(exc)
        return Failure(retryable=kind in TRANSIENT_ERRORS,
                       description=f"error event in the stream after HTTP {status}: {kind or 'error'}: {message}",
                       body=body if isinstance(body, dict) else None, kind=MIDSTREAM)
    if isinstance(status, int) and not isinstance(status, bool):
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        try:
            body = response.json()               # the whole error body, as received
        except Exception:  # noqa: BLE001 - not JSON, or no response
            body = getattr(exc, "body", None)
        message = _error_message(body) or getattr(exc, "message", None) or str(exc)
        return Failure(retryable=status in RETRYABLE_STATUS, description=f"HTTP {status}: {message}",
                       status=status, headers=headers, body=body, kind=STATUS)
    chain = _chain(exc)
    names = [n for e in chain for n in _names(e)]
    detail = "; ".join(dict.fromkeys(str(e) for e in chain if str(e)))
    if any(n in ("ConnectError", "ConnectTimeout") for n in names) or any(
            isinstance(e, (ConnectionRefusedError, socket.gaierror)) for e in chain):
        return Failure(retryable=True, description=f"connection failed: {detail}", kind=CONNECT)
    if isinstance(exc, TimeoutError) or any("Timeout" in n for n in names):
        return Failure(retryable=True, description=f"timeout: {detail}", kind=TIMEOUT)
    if isinstance(exc, ConnectionError) or any(n.endswith(("ConnectionError", "TransportError", "NetworkError",
                                                             "ProtocolError")) for n in names):
        return Failure(retryable=True, description=f"connection error: {detail}", kind=DROPPED)
    return None


def call_with_retry(fn: Callable[[], T], policy: RetryPolicy | None = None, *,
                    classify: Callable[[BaseException], Failure | None] = classify_exception) -> Outcome[T]:
    """Call ``fn`` until it returns, fails for good, or ``policy.max_attempts`` is reached.

    Failures come back in the :class:`Outcome` (never raised); an exception ``classify`` does
    not recognise (``None``) propagates, since it is a bug rather than a failed call."""
    policy = policy or RetryPolicy()
    outcome: Outcome[T] = Outcome()
    connects = 0
    start = time.monotonic()
    while True:
        outcome.attempts += 1
        try:
            outcome.value = fn()
            outcome.error = outcome.failure = None
            break
        except Exception as exc:  # noqa: BLE001 - classified below
            failure = classify(exc)
            if failure is None:
                raise
            outcome.error, outcome.failure = exc, failure
            if failure.kind == TIMEOUT:
                outcome.timeouts += 1
            if not failure.retryable or outcome.attempts >= policy.max_attempts:
                break
            if failure.kind == TIMEOUT and outcome.timeouts > policy.timeout_retries:
                break
            connects += failure.kind == CONNECT
            if failure.kind == CONNECT and policy.connect_attempts is not None \
                    and connects >= policy.connect_attempts:
                break
            wait = policy.delay(outcome.attempts, failure.headers)
            outcome.delays.append(wait)
            policy.sleep(wait)
    outcome.seconds = time.monotonic() - start
    return outcome
