"""A scripted loopback HTTP server that speaks just enough of two wire formats for the real SDKs:

* Anthropic Messages: ``POST /v1/messages``
* OpenAI Chat Completions: ``POST /v1/chat/completions``

Tests queue replies per route (:meth:`Loopback.script`); each request pops the next one.  A reply
is described once and rendered in the route's format: a ``submit_kernel`` tool call
(:func:`tool`), plain text (:func:`text`), tool arguments that are not valid JSON
(:func:`raw_arguments`), an HTTP error with optional ``Retry-After`` (:func:`error`), or any raw
body (:func:`raw`).  Modifiers, each returning a new reply:

* ``.slow(seconds)`` delays the whole reply (to outlast a tiny client timeout);
* ``.trickle(seconds)`` waits between the events of a streamed reply (each gap below the
  timeout, the whole answer longer than it);
* ``.thinking(text, signature)`` / ``.redacted(data)`` put thinking blocks first (Anthropic),
  ``.usage(reasoning=, cache_read=, cache_write=, cache_write_1h=)`` adds the providers' token
  details (Anthropic ``output_tokens_details`` / ``cache_*_input_tokens``, OpenAI
  ``completion_tokens_details`` / ``prompt_tokens_details``);
* ``.truncated()`` cuts the answer at the output limit (``stop_reason: max_tokens`` /
  ``finish_reason: length``, tool input or arguments cut short).

A request whose body has ``"stream": true`` gets the reply as server-sent events in the route's
streaming format (Anthropic ``message_start`` ... ``message_stop``; OpenAI ``chat.completion.chunk``
lines, a usage chunk when ``stream_options.include_usage`` is set, then ``[DONE]``).  Every request
is recorded (method, path, lower-cased headers, parsed JSON body).  :func:`closed_port_url` gives
an address where nothing listens.

The server listens on 127.0.0.1 on a free port, in a daemon thread, and is stopped (slow replies
included) when the ``loopback`` fixture ends.  A request with no scripted reply gets HTTP 501
(not retried) and is listed in :attr:`Loopback.unscripted`.
"""
from __future__ import annotations

import itertools
import json
import os
import socket
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
    input_tokens: int = 1000                   # as the provider reports it (Anthropic: uncached input)
    output_tokens: int = 500
    delay: float = 0.0
    note: str | None = None                    # text beside a tool call
    gap: float = 0.0                           # seconds between streamed events
    thoughts: tuple = ()                       # (("thinking", text, signature) | ("redacted", data), ...)
    reasoning_tokens: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    cache_write_1h: int | None = None
    cut: bool = False                          # truncated at the output limit

    def slow(self, seconds: float) -> "Reply":
        return replace(self, delay=seconds)

    def trickle(self, seconds: float) -> "Reply":
        return replace(self, gap=seconds)

    def thinking(self, text: str, signature: str) -> "Reply":
        return replace(self, thoughts=self.thoughts + (("thinking", text, signature),))

    def redacted(self, data: str) -> "Reply":
        return replace(self, thoughts=self.thoughts + (("redacted", data),))

    def usage(self, *, reasoning: int | None = None, cache_read: int | None = None,
              cache_write: int | None = None, cache_write_1h: int | None = None) -> "Reply":
        return replace(self, reasoning_tokens=reasoning, cache_read=cache_read, cache_write=cache_write,
                       cache_write_1h=cache_write_1h)

    def truncated(self) -> "Reply":
        return replace(self, cut=True)


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
    """``body`` as given (dict -> JSON, str/bytes -> as is; a ``Content-Type`` in ``headers`` wins)."""
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


def _cut(text: str) -> str:
    return text[: max(1, len(text) // 2)]


def _anthropic_usage(r: Reply) -> dict:
    usage: dict[str, Any] = {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens}
    if r.cache_read is not None:
        usage["cache_read_input_tokens"] = r.cache_read
    if r.cache_write is not None or r.cache_write_1h is not None:
        five, hour = r.cache_write or 0, r.cache_write_1h or 0
        usage["cache_creation_input_tokens"] = five + hour
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": five, "ephemeral_1h_input_tokens": hour}
    if r.reasoning_tokens is not None:
        usage["output_tokens_details"] = {"thinking_tokens": r.reasoning_tokens}
    return usage


def _anthropic_content(r: Reply) -> tuple[list[dict], str]:
    """The content blocks and stop reason of a tool/text reply."""
    content: list[dict] = []
    for t in r.thoughts:
        content.append({"type": "thinking", "thinking": t[1], "signature": t[2]} if t[0] == "thinking"
                       else {"type": "redacted_thinking", "data": t[1]})
    if r.kind in ("tool", "raw_arguments"):
        if r.note:
            content.append({"type": "text", "text": r.note})
        tool_input = r.payload
        if r.cut and isinstance(tool_input, dict):
            tool_input = {k: _cut(v) if isinstance(v, str) else v for k, v in list(tool_input.items())[:1]}
        content.append({"type": "tool_use", "id": f"toolu_loop_{next(_ids)}", "name": "submit_kernel",
                        "input": tool_input})
        stop = "tool_use"
    else:
        content.append({"type": "text", "text": _cut(r.payload) if r.cut else r.payload})
        stop = "end_turn"
    return content, ("max_tokens" if r.cut else stop)


def _render_anthropic(r: Reply, req: dict) -> tuple[int, Any]:
    model = req.get("model", "unknown") if isinstance(req, dict) else "unknown"
    base = {"id": f"msg_loop_{next(_ids)}", "type": "message", "role": "assistant", "model": model,
            "stop_sequence": None, "usage": _anthropic_usage(r)}
    if r.kind in ("tool", "raw_arguments", "text"):
        content, stop = _anthropic_content(r)
        return 200, {**base, "content": content, "stop_reason": stop}
    if r.kind == "error":
        etype = _ERROR_TYPES.get(r.status, "api_error")
        return r.status, {"type": "error", "error": {"type": etype, "message": r.payload}}
    return r.status, r.payload


def _pieces(text: str, n: int = 3) -> list[str]:
    step = max(1, -(-len(text) // n))
    return [text[i:i + step] for i in range(0, len(text), step)] or [""]


def _anthropic_events(r: Reply, req: dict) -> list[tuple[str, dict]]:
    """A tool/text reply as Anthropic's server-sent events."""
    status, message = _render_anthropic(r, req)
    usage = message["usage"]
    start_usage = {k: v for k, v in usage.items() if k not in ("output_tokens", "output_tokens_details")}
    start = {**{k: v for k, v in message.items() if k not in ("content", "usage")},
             "content": [], "stop_reason": None, "usage": {**start_usage, "output_tokens": 1}}
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "thinking":
            head = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            head = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        elif kind == "tool_use":
            head = {**block, "input": {}}
            raw_json = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
            if r.cut:
                raw_json = _cut(json.dumps(r.payload) if isinstance(r.payload, dict) else raw_json)
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(raw_json)]
        else:                                   # redacted_thinking arrives whole
            head, deltas = block, []
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": head}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    end_usage = {"output_tokens": usage["output_tokens"]}
    if "output_tokens_details" in usage:
        end_usage["output_tokens_details"] = usage["output_tokens_details"]
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                     "usage": end_usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _openai_usage(r: Reply) -> dict:
    usage: dict[str, Any] = {"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
                             "total_tokens": r.input_tokens + r.output_tokens}
    if r.cache_read is not None or r.cache_write is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": r.cache_read or 0}
        if r.cache_write is not None:
            usage["prompt_tokens_details"]["cache_write_tokens"] = r.cache_write
    if r.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": r.reasoning_tokens}
    return usage


def _openai_message(r: Reply) -> tuple[dict, str]:
    if r.kind in ("tool", "raw_arguments"):
        arguments = json.dumps(r.payload) if r.kind == "tool" else r.payload
        if r.cut:
            arguments = _cut(arguments)
        message = {"role": "assistant", "content": r.note,
                   "tool_calls": [{"id": f"call_loop_{next(_ids)}", "type": "function",
                                   "function": {"name": "submit_kernel", "arguments": arguments}}]}
        return message, "length" if r.cut else "tool_calls"
    return {"role": "assistant", "content": _cut(r.payload) if r.cut else r.payload}, "length" if r.cut else "stop"


def _render_openai(r: Reply, req: dict) -> tuple[int, Any]:
    model = req.get("model", "unknown") if isinstance(req, dict) else "unknown"
    base = {"id": f"chatcmpl-loop-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "usage": _openai_usage(r)}
    if r.kind in ("tool", "raw_arguments", "text"):
        message, finish = _openai_message(r)
        return 200, {**base, "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if r.kind == "error":
        etype = _ERROR_TYPES.get(r.status, "api_error")
        return r.status, {"error": {"message": r.payload, "type": etype, "param": None, "code": None}}
    return r.status, r.payload


def _openai_events(r: Reply, req: dict) -> list[tuple[str | None, Any]]:
    """A tool/text reply as OpenAI's streamed ``chat.completion.chunk`` objects."""
    model = req.get("model", "unknown")
    cid, created = f"chatcmpl-loop-{next(_ids)}", int(time.time())

    def chunk(choices, **extra):
        return (None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": choices, **extra})

    message, finish = _openai_message(r)
    out = [chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    for p in _pieces(message.get("content") or "") if message.get("content") else []:
        out.append(chunk([{"index": 0, "delta": {"content": p}, "finish_reason": None}]))
    for call in message.get("tool_calls") or []:
        out.append(chunk([{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": ""}}]}, "finish_reason": None}]))
        for p in _pieces(call["function"]["arguments"]):
            out.append(chunk([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": p}}]},
                               "finish_reason": None}]))
    out.append(chunk([{"index": 0, "delta": {}, "finish_reason": finish}]))
    if (req.get("stream_options") or {}).get("include_usage"):
        out.append(chunk([], usage=_openai_usage(r)))
    out.append((None, "[DONE]"))
    return out


def closed_port_url() -> str:
    """``http://127.0.0.1:PORT`` where nothing listens (a port just bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


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
            request = body if isinstance(body, dict) else {}
            if reply.delay and self._stop.wait(reply.delay):
                return                          # shutting down: drop the reply
            if request.get("stream") and reply.kind in ("tool", "raw_arguments", "text"):
                events = (_anthropic_events if path == ANTHROPIC else _openai_events)(reply, request)
                self._stream(h, events, reply)
                return
            render = _render_anthropic if path == ANTHROPIC else _render_openai
            status, payload = render(reply, request)
            headers = reply.headers
        if isinstance(payload, (dict, list)):
            out = json.dumps(payload).encode()
            ctype = "application/json"
        elif isinstance(payload, bytes):
            out, ctype = payload, "application/octet-stream"
        else:
            out, ctype = str(payload if payload is not None else "").encode(), "text/plain"
        try:
            h.send_response(status)
            if not any(k.lower() == "content-type" for k in headers):
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

    def _stream(self, h: BaseHTTPRequestHandler, events, reply: Reply) -> None:
        """Server-sent events, ``reply.gap`` seconds apart, then close the connection."""
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("Connection", "close")
            h.send_header("request-id", f"req_loop_{next(_ids)}")
            for k, v in reply.headers.items():
                h.send_header(k, v)
            h.end_headers()
            for i, (name, data) in enumerate(events):
                if i and reply.gap and self._stop.wait(reply.gap):
                    break
                text = data if isinstance(data, str) else json.dumps(data)
                frame = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
                h.wfile.write(frame.encode())
                h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            pass
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
