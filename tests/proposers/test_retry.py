"""kernel_forge.proposers.retry: the one retry policy of every model call -- what is retried, how long it
waits (Retry-After honoured, backoff capped), and the bounds on timeouts and connections never made."""
from __future__ import annotations

import email.utils

import pytest

from kernel_forge.proposers import retry


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)

def test_retry_after_parsing_and_caps():
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert retry.parse_retry_after({"Retry-After": date}, now=lambda: now) == pytest.approx(7, abs=1)
    assert retry.parse_retry_after({"retry-after": "3.5"}) == 3.5
    assert retry.parse_retry_after({"retry-after": "3", "retry-after-ms": "250"}) == 0.25
    assert retry.parse_retry_after({"retry-after": "soon"}) is None
    assert retry.parse_retry_after({}) is None
    past = email.utils.formatdate(now - 60, usegmt=True)
    assert retry.parse_retry_after({"Retry-After": past}, now=lambda: now) == 0.0

    policy = retry.RetryPolicy(max_delay=10.0, base_delay=1.0, jitter=0.5, random=lambda: 1.0)
    assert policy.delay(1, {"retry-after": "3600"}) == 10.0          # capped
    assert policy.delay(1, None) == 0.5                              # full jitter taken
    assert policy.delay(10, None) == 5.0                             # capped then jittered
    with pytest.raises(ValueError):
        retry.RetryPolicy(max_attempts=0)


def test_call_with_retry_without_http():
    sleeps = Sleeps()
    seen = []

    def flaky():
        seen.append(1)
        if len(seen) < 3:
            raise TimeoutError("slow")
        return "done"

    out = retry.call_with_retry(flaky, retry.RetryPolicy(sleep=sleeps, random=lambda: 0.0))
    assert out.ok and out.value == "done" and out.attempts == 3 and sleeps == [1.0, 2.0] == out.delays

    def bug():
        raise KeyError("not a call failure")

    with pytest.raises(KeyError):
        retry.call_with_retry(bug, retry.RetryPolicy(sleep=sleeps))


class StatusError(Exception):
    """An SDK status error as both SDKs raise it: ``status_code``, the response, its JSON body."""

    def __init__(self, status: int, body: object, headers: dict | None = None):
        super().__init__(f"status {status}")
        self.status_code, self.body = status, body
        self.response = type("Response", (), {"headers": headers or {}, "json": lambda _self: body})()


class ConnectError(Exception):
    """Named as the HTTP library's: a connection that was never made."""


def test_each_failure_is_classified_by_what_it_says_about_trying_again():
    busy = retry.classify_exception(StatusError(529, {"error": {"type": "overloaded_error", "message": "busy"}},
                                                {"retry-after": "2"}))
    assert (busy.retryable, busy.kind, busy.status, busy.description) == (True, "status", 529, "HTTP 529: busy")
    assert busy.headers == {"retry-after": "2"}
    bad = retry.classify_exception(StatusError(400, {"error": {"message": "bad field", "param": "temperature"}}))
    assert (bad.retryable, bad.description, bad.message) == (False, "HTTP 400: bad field",
                                                             "bad field (param: temperature)")
    # an error event inside a stream that began with HTTP 200: retried only where its type passes
    event = retry.classify_exception(StatusError(200, {"type": "error", "error": {"type": "api_error",
                                                                                  "message": "oops"}}))
    assert (event.retryable, event.kind) == (True, "midstream")
    assert event.description == "error event in the stream after HTTP 200: api_error: oops"
    assert retry.classify_exception(StatusError(200, {"error": {"type": "invalid_request_error"}})).retryable is False
    dropped = retry.classify_exception(retry.MidStreamError("cut", transient=True, dropped=True))
    assert (dropped.retryable, dropped.kind, dropped.description) == (True, "dropped", "cut")
    assert retry.classify_exception(retry.MidStreamError("no", transient=False)).kind == "midstream"


def test_a_connection_never_made_a_timeout_and_a_broken_connection_are_told_apart_and_a_bug_is_not_a_failure():
    try:
        try:
            raise ConnectError("connection refused")
        except ConnectError as inner:
            raise RuntimeError("APIConnectionError: Connection error.") from inner
    except RuntimeError as outer:
        wrapped = outer
    never = retry.classify_exception(wrapped)                    # the SDK's error raised from the HTTP library's
    assert (never.kind, never.retryable) == ("connect", True)
    assert never.description == "connection failed: APIConnectionError: Connection error.; connection refused"
    assert retry.classify_exception(ConnectionRefusedError("refused")).kind == "connect"
    assert retry.classify_exception(TimeoutError("read timed out")).description == "timeout: read timed out"
    assert retry.classify_exception(ConnectionResetError("reset")).kind == "dropped"
    assert retry.classify_exception(KeyError("k")) is None


def test_the_error_type_of_a_body_is_its_error_type_else_its_code_lower_cased():
    assert retry.error_type({"type": "error", "error": {"type": "Overloaded_Error"}}) == "overloaded_error"
    assert retry.error_type({"error": {"code": "rate_limit_exceeded"}}) == "rate_limit_exceeded"
    assert retry.error_type({"type": "error"}) is None                      # "error" names nothing
    assert retry.error_type("overloaded") is None and retry.error_type({"error": {}}) is None


def test_timeouts_and_connections_never_made_have_their_own_smaller_bounds():
    def failing(exc):
        def fn():
            raise exc
        return fn

    sleeps = Sleeps()
    slow = retry.call_with_retry(failing(TimeoutError("slow")),
                                 retry.RetryPolicy(max_attempts=5, timeout_retries=1, sleep=sleeps, random=lambda: 0.0))
    assert (slow.ok, slow.attempts, slow.timeouts, sleeps) == (False, 2, 2, [1.0])
    assert slow.failure.kind == "timeout" and isinstance(slow.error, TimeoutError)
    down = retry.call_with_retry(failing(ConnectionRefusedError("refused")),
                                 retry.RetryPolicy(max_attempts=5, connect_attempts=3, sleep=Sleeps(), random=lambda: 0.0))
    assert (down.attempts, down.timeouts, down.delays) == (3, 0, [1.0, 2.0])
    once = retry.call_with_retry(failing(StatusError(401, {"error": {"message": "bad key"}})),
                                 retry.RetryPolicy(sleep=Sleeps()))
    assert (once.attempts, once.delays, once.failure.description) == (1, [], "HTTP 401: bad key")


def test_a_policy_with_impossible_bounds_is_refused():
    with pytest.raises(ValueError, match="timeout_retries must be >= 0 and connect_attempts >= 1"):
        retry.RetryPolicy(timeout_retries=-1)
    with pytest.raises(ValueError, match="timeout_retries must be >= 0 and connect_attempts >= 1"):
        retry.RetryPolicy(connect_attempts=0)
    with pytest.raises(ValueError, match="jitter within"):
        retry.RetryPolicy(jitter=1.5)
