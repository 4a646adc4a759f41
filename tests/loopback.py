"""A scripted loopback HTTP server that speaks just enough of two wire formats for the real SDKs:

* Anthropic Messages: ``POST /v1/messages``
* OpenAI Chat Completions: ``POST /v1/chat/completions``

Tests queue replies per route (:meth:`Loopback.script`); each request pops the next one.  A reply
is described once and rendered in the route's format: a ``submit_kernel`` tool call
(:func:`tool`), plain text (:func:`text`), tool arguments that are not valid JSON
(:func:`raw_arguments`), an HTTP error with optional ``Retry-After`` (:func:`error`), or any raw
body (:func:`raw`); ``.slow(seconds)`` delays any of them (to outlast a tiny client timeout).
Every request is recorded (method, path, lower-cased headers, parsed JSON body).

The server listens on 127.0.0.1 on a free port, in a daemon thread, and is stopped (slow replies
included) when the ``loopback`` fixture ends.  A request with no scripted reply gets HTTP 501
(not retried) and is listed in :attr:`Loopback.unscripted`.
"""
from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

ANTHROPIC = "/v1/messages"
OPENAI = "/v1/chat/completions"
_ROUTES = {"anthropic": ANTHROPIC, "openai": OPENAI}
_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    kind: str                                  # tool | text | raw_arguments | error | raw
    payload: Any = None
    status: int = 200
    headers: dict = field(default_factory=dict)
    input_tokens: int = 1000
    output_tokens: int = 500
    delay: float = 0.0
    note: str | None = None                    # text beside a tool call

    def slow(self, seconds: float) -> "Reply":
        return replace(self, delay=seconds)


def tool(args: dict, *, input_tokens: int = 1000, output_tokens: int = 500, note: str | None = None) -> Reply:
    """A ``submit_kernel`` call with ``args``."""
    return Reply("tool", args, input_tokens=input_tokens, output_tokens=output_tokens, note=note)


def raw_arguments(arguments: str, **kw) -> Reply:
    """A ``submit_kernel`` call whose arguments string is sent verbatim (e.g. broken JSON)."""
    return Reply("raw_arguments", arguments, **kw)


def text(content: str, **kw) -> Reply:
    """A plain-text answer without any tool call."""
    return Reply("text", content, **kw)


def error(status: int, message: str = "scripted failure", *, retry_after: str | None = None,
          retry_after_ms: str | None = None, headers: dict | None = None) -> Reply:
    h = dict(headers or {})
    if retry_after is not None:
        h["Retry-After"] = retry_after
    if retry_after_ms is not None:
        h["retry-after-ms"] = retry_after_ms
    return Reply("error", message, status=status, headers=h)


def raw(status: int, body: Any, headers: dict | None = None) -> Reply:
    """``body`` as given (dict -> JSON, str/bytes -> as is)."""
    return Reply("raw", body, status=status, headers=dict(headers or {}))


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    time: float


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
                500: "api_error", 529: "overloaded_error"}


def _render_anthropic(r: Reply, req: dict) -> tuple[int, Any]:
    model = req.get("model", "unknown") if isinstance(req, dict) else "unknown"
    usage = {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens}
    base = {"id": f"msg_loop_{next(_ids)}", "type": "message", "role": "assistant", "model": model,
            "stop_sequence": None, "usage": usage}
    if r.kind in ("tool", "raw_arguments"):
        content = [{"type": "text", "text": r.note}] if r.note else []
        content.append({"type": "tool_use", "id": f"toolu_loop_{next(_ids)}", "name": "submit_kernel",
                        "input": r.payload})
        return 200, {**base, "content": content, "stop_reason": "tool_use"}
    if r.kind == "text":
        return 200, {**base, "content": [{"type": "text", "text": r.payload}], "stop_reason": "end_turn"}
    if r.kind == "error":
        etype = _ERROR_TYPES.get(r.status, "api_error")
        return r.status, {"type": "error", "error": {"type": etype, "message": r.payload}}
    return r.status, r.payload


def _render_openai(r: Reply, req: dict) -> tuple[int, Any]:
    model = req.get("model", "unknown") if isinstance(req, dict) else "unknown"
    usage = {"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
             "total_tokens": r.input_tokens + r.output_tokens}
    base = {"id": f"chatcmpl-loop-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "usage": usage}
    if r.kind in ("tool", "raw_arguments"):
        arguments = json.dumps(r.payload) if r.kind == "tool" else r.payload
        message = {"role": "assistant", "content": r.note,
                   "tool_calls": [{"id": f"call_loop_{next(_ids)}", "type": "function",
                                   "function": {"name": "submit_kernel", "arguments": arguments}}]}
        return 200, {**base, "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    if r.kind == "text":
        message = {"role": "assistant", "content": r.payload}
        return 200, {**base, "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    if r.kind == "error":
        etype = _ERROR_TYPES.get(r.status, "api_error")
        return r.status, {"error": {"message": r.payload, "type": etype, "param": None, "code": None}}
    return r.status, r.payload


class Loopback:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Reply]] = {ANTHROPIC: deque(), OPENAI: deque()}
        self.received: list[Received] = []
        self.unscripted: list[Received] = []
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting --------------------------------------------------------------------------
    def script(self, route: str, *replies: Reply) -> None:
        path = _ROUTES.get(route, route)
        with self._lock:
            self._queues.setdefault(path, deque()).extend(replies)

    def pending(self, route: str) -> int:
        with self._lock:
            return len(self._queues.get(_ROUTES.get(route, route), ()))

    def requests(self, route: str) -> list[Received]:
        path = _ROUTES.get(route, route)
        with self._lock:
            return [r for r in self.received if r.path == path]

    # -- addresses --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "loopback server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def anthropic_base_url(self) -> str:
        return self.url                         # the SDK appends /v1/messages

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"                 # the SDK appends /chat/completions

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> "Loopback":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):       # keep test output quiet
                pass

            def do_POST(self):
                owner._handle(self)

            def do_GET(self):
                owner._handle(self)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="loopback-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- serving ----------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        data = h.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(data) if data else None
        except ValueError:
            body = data.decode("utf-8", "replace")
        path = h.path.split("?", 1)[0]
        rec = Received(h.command, path, {k.lower(): v for k, v in h.headers.items()}, body, time.time())
        with self._lock:
            self.received.append(rec)
            queue = self._queues.get(path)
            reply = queue.popleft() if queue else None
            if reply is None:
                self.unscripted.append(rec)
        if reply is None:
            status, payload, headers = 501, {"error": {"message": f"loopback: nothing scripted for {path}",
                                                       "type": "loopback"}}, {}
        else:
            render = _render_anthropic if path == ANTHROPIC else _render_openai
            status, payload = render(reply, body if isinstance(body, dict) else {})
            headers = reply.headers
            if reply.delay and self._stop.wait(reply.delay):
                return                          # shutting down: drop the reply
        if isinstance(payload, (dict, list)):
            out = json.dumps(payload).encode()
            ctype = "application/json"
        elif isinstance(payload, bytes):
            out, ctype = payload, "application/octet-stream"
        else:
            out, ctype = str(payload if payload is not None else "").encode(), "text/plain"
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(out)))
            h.send_header("Connection", "close")
            h.send_header("request-id", f"req_loop_{next(_ids)}")
            for k, v in headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(out)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            pass                                # the client gave up (timeout test)
        h.close_connection = True


@pytest.fixture
def loopback():
    """A started :class:`Loopback`; stopped at teardown."""
    server = Loopback().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def clean_env(monkeypatch):
    """No ambient credentials, base URLs or proxies reach the SDK clients."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith(("ANTHROPIC_", "OPENAI_")) or upper.endswith("_PROXY") or upper == "NO_PROXY":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
