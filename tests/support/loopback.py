"""A scripted loopback HTTP server that answers as the providers' documented APIs do, for the real SDKs:

* Anthropic Messages: ``POST /v1/messages``
* OpenAI Responses: ``POST /v1/responses``
* OpenAI Chat Completions: ``POST /v1/chat/completions`` (what OpenAI-compatible servers speak)

**Every request body is checked against the installed SDK's own request type**
(``anthropic.types.MessageCreateParams*``, ``openai.types.responses.ResponseCreateParams*``,
``openai.types.chat.CompletionCreateParams*``, strictly: tests/support/sdk_types.py): a field or
value the SDK does not define gets an HTTP 400 and is listed in :attr:`Loopback.invalid`, and the
``loopback`` fixture (tests/conftest.py) fails the test that sent it.  Then the rules the providers
document for every model alike get the provider's own 400 body: ``budget_tokens`` below 1,024 or
not below ``max_tokens``, more than four cache breakpoints or a long-lived breakpoint after a
short-lived one, a reasoning item sent back without its encrypted content under ``store: false``, a
``previous_response_id`` that was never stored.  **Nothing is decided from kforge's capability
table** (``kernel_forge/data/models.json``): what each listed model takes is asserted per model by
the tests.  Rejected requests are listed in :attr:`Loopback.rejected` (each one is a 400 round
trip a proposer should not have made) and do not use up a scripted reply.

**Usage is the provider's own**: Anthropic ``input_tokens`` (uncached), ``cache_read_input_tokens``,
``cache_creation_input_tokens`` with ``cache_creation.ephemeral_5m/1h_input_tokens``,
``output_tokens`` and ``output_tokens_details.thinking_tokens``; OpenAI Responses ``input_tokens``,
``input_tokens_details.cached_tokens`` / ``cache_write_tokens``, ``output_tokens``,
``output_tokens_details.reasoning_tokens``; Chat Completions from a local server: only the
totals.  Input tokens are counted from the request (a character is a quarter of a token) unless a
reply gives them.

**The prompt cache follows each provider's documented rule**: Anthropic caches the prefix up to
each ``cache_control`` breakpoint that clears the model's minimum (:data:`ANTHROPIC_CACHE_MINIMUM`,
kept here, not read from the table), with its lifetime (5 min or 1 h, refreshed on a read);
OpenAI's models before GPT-5.6 cache each prompt and match the longest common prefix in 128-token
steps from 1,024 tokens, per ``prompt_cache_key``; GPT-5.6 and later cache exactly at breakpoints
(``prompt_cache_breakpoint`` on content parts, and one implicit breakpoint, here the end of the
prompt), read the longest cached breakpoint prefix and write up to four breakpoints, each at its
lifetime (the SDK 3.60 docstrings of ``PromptCacheOptions`` and ``PromptCacheBreakpoint``).  A cache entry becomes readable when
the response that wrote it *starts* (``start_delay`` seconds after it arrives), so requests sent
all at once each write the cache, and requests sent after the first has started read it.
``advance(seconds)`` moves the cache's clock (to let entries expire).

Tests queue replies per route (:meth:`Loopback.script`); each accepted request pops the next one.
A reply is described once and rendered in the route's format: ``tool(args)`` is a ``submit_kernel``
call when the request offers tools, and otherwise the same proposal as a text answer in kforge's
answer format (rationale, a ```` ```cuda ```` block, a ```` ```json ```` part); :func:`text` is plain
text; :func:`raw_arguments` tool arguments sent verbatim; :func:`error` an HTTP error; :func:`raw`
any body.  Modifiers: ``.slow(s)``, ``.trickle(s)``, ``.thinking(text, signature)`` /
``.redacted(data)`` (Anthropic thinking blocks; an OpenAI reasoning item), ``.usage(...)``
(explicit token details), ``.truncated()``.  An answer longer than the request's output limit
(``output_tokens`` above ``max_tokens`` / ``max_output_tokens``) is cut off as the API does.
Streaming follows each API's event format.  Every request is recorded; a request with no
scripted reply gets HTTP 501 and is listed in :attr:`Loopback.unscripted`.
"""
from __future__ import annotations

import hashlib
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

from tests.support.sdk_types import check_request, warm

ANTHROPIC = "/v1/messages"
OPENAI = "/v1/chat/completions"
RESPONSES = "/v1/responses"
#: "openai" scripts replies for whichever OpenAI route a request takes (Responses or Chat Completions)
OPENAI_ANY = "openai"
_ROUTES = {"anthropic": ANTHROPIC, "openai": OPENAI_ANY, "chat": OPENAI, "responses": RESPONSES}
_ids = itertools.count(1)
CHARS_PER_TOKEN = 4.0
TTL = {"5m": 300.0, "1h": 3600.0, "30m": 1800.0, "12h": 43200.0}


@dataclass(frozen=True)
class Reply:
    kind: str                                  # tool | text | raw_arguments | error | raw
    payload: Any = None
    status: int = 200
    headers: dict = field(default_factory=dict)
    input_tokens: int | None = None            # None: counted from the request (cache simulated)
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
    fault: tuple = ()                          # (what, error type, message): a stream that fails mid-answer
    stop: str | None = None                    # a stop no repair mends: "refusal", "context", "filter"
    ping: float = 0.0                          # seconds between keepalives while a streamed event waits

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

    def fails_midstream(self, what: str = "error", error_type: str = "overloaded_error",
                        message: str = "Overloaded") -> "Reply":
        """Streamed: HTTP 200 and the answer's first half (Anthropic's ``message_start`` with its usage
        included), then ``what``: ``"error"`` -- the route's error in the stream (Anthropic an
        ``error`` event of ``error_type``; Responses an ``error`` event with that code; Chat
        Completions an error chunk); ``"failed"`` -- Responses ``response.failed`` (with the usage so
        far); ``"drop"`` -- the connection closes."""
        return replace(self, fault=(what, error_type, message))

    def stopped(self, why: str) -> "Reply":
        """An answer that ends in a stop no repair mends: ``"refusal"`` (Anthropic stop_reason refusal;
        OpenAI a refusal), ``"context"`` (Anthropic model_context_window_exceeded), ``"filter"``
        (Responses incomplete for content_filter; Chat finish_reason content_filter)."""
        return replace(self, stop=why)

    def keepalive(self, every: float) -> "Reply":
        """Streamed: while an event waits out ``.trickle(s)``, a keepalive every ``every`` seconds
        (Anthropic ``event: ping``; Responses a ``keepalive`` event; Chat Completions an SSE comment)."""
        return replace(self, ping=every)


def tool(args: dict, *, input_tokens: int | None = None, output_tokens: int = 500, note: str | None = None,
         reasoning_tokens: int | None = None) -> Reply:
    """A proposal: a ``submit_kernel`` call where tools are offered, else the answer-format text."""
    return Reply("tool", args, input_tokens=input_tokens, output_tokens=output_tokens, note=note,
                 reasoning_tokens=reasoning_tokens)


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


def fenced_answer(args: dict) -> str:
    """A proposal's arguments as a text answer in kforge's answer format."""
    extras = {k: args[k] for k in ("launch", "tunables", "direction", "technique", "predicted_speedup") if k in args}
    out = (args.get("rationale") or "").strip() + "\n\n```cuda\n" + str(args.get("source", "")).rstrip() + "\n```\n"
    if extras:
        out += "\n```json\n" + json.dumps(extras) + "\n```\n"
    return out


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    time: float


@dataclass
class Rejected:
    path: str
    model: str
    message: str
    body: Any


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


def _cut(text: str) -> str:
    return text[: max(1, len(text) // 2)]


def tokens_of(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN)


#: Anthropic's minimum cacheable prompt per model (a breakpoint below it caches nothing), from the
#: provider's prompt-caching pages and the reports the capability table cites under
#: ``claude-cache-min``; kept here, apart from kernel_forge/data/models.json, so that a wrong
#: ``min_cache_tokens`` there shows up as a cache that is not read.  Longest prefix wins.
ANTHROPIC_CACHE_MINIMUM = (
    ("claude-opus-4-5", 4096), ("claude-opus-4-6", 4096), ("claude-opus-4-7", 4096), ("claude-haiku-4-5", 4096),
    ("claude-sonnet-4", 1024), ("claude-opus-4-8", 1024), ("claude-sonnet-5-5", 512), ("claude-sonnet-5", 1024),
    ("claude-opus-5", 512), ("claude-haiku-5", 512), ("claude-fable-5", 512), ("claude-mythos-5", 512),
)
#: a Claude model not listed above
ANTHROPIC_CACHE_MINIMUM_DEFAULT = 1024
#: OpenAI's minimum cached prompt (prompt-caching guide: prompts of 1,024 tokens or more)
OPENAI_CACHE_MINIMUM = 1024


def anthropic_cache_minimum(model: str) -> int:
    model = (model or "").lower()
    found = [(len(k), v) for k, v in ANTHROPIC_CACHE_MINIMUM if model.startswith(k)]
    return max(found)[1] if found else ANTHROPIC_CACHE_MINIMUM_DEFAULT


def openai_breakpoint_cache(model: str) -> bool:
    """Whether ``model`` caches at breakpoints (gpt-5.6 and later, by the SDK's PromptCacheOptions
    docstring) rather than on the longest common prefix."""
    import re

    m = re.match(r"gpt-(\d+)(?:\.(\d+))?", (model or "").lower())
    return m is not None and (int(m.group(1)), int(m.group(2) or 0)) >= (5, 6)


# ---------------------------------------------------------------------------- request checks
#
# First every body is checked against the installed SDK's own request type (tests/support/sdk_types.py):
# a field or value the API does not define is a 400.  Then the rules the providers document for
# every model alike.  Nothing here reads kforge's capability table: what one model accepts is
# asserted by the tests, per model (tests/proposers/test_table_bodies.py).

def _check_anthropic(req: dict) -> str | None:
    """The 400 message Anthropic documents for this request (any model), or None."""
    breakpoints = _anthropic_breakpoints(req)
    if len(breakpoints) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {len(breakpoints)}."
    ttls = [TTL.get(b["ttl"], 300.0) for b in breakpoints]
    if any(a < b for a, b in zip(ttls, ttls[1:])):
        return ("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block: "
                "cache entries with a longer TTL must appear before shorter ones")
    thinking = req.get("thinking") or {}
    limit = req.get("max_tokens") or 0
    if thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens") or 0
        if budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if budget >= limit:
            return "`max_tokens` must be greater than `thinking.budget_tokens`."
    return None


def _check_responses(req: dict, stored: set[str]) -> tuple[str, str | None, str] | None:
    """(message, param, code) of the 400 OpenAI documents for this Responses request, or None."""
    prev = req.get("previous_response_id")
    if prev is not None and prev not in stored:
        return f"Previous response with id '{prev}' not found.", "previous_response_id", "previous_response_not_found"
    if req.get("store") is False:
        for item in req.get("input") or []:
            if isinstance(item, dict) and item.get("type") == "reasoning" and not item.get("encrypted_content"):
                return (f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` is set to "
                        "false. Try again with `store` set to true, or remove this item from your input.",
                        "input", None)
    return None


# ---------------------------------------------------------------------------- the prompt caches

class PromptCache:
    """Cache entries by key: readable from ``available`` until ``expires`` (reads refresh)."""

    def __init__(self, clock):
        self.clock = clock
        self.entries: dict[str, dict] = {}
        self.lock = threading.Lock()

    def readable(self, key: str) -> bool:
        e = self.entries.get(key)
        now = self.clock()
        return e is not None and e["available"] <= now < e["expires"]

    def touch(self, key: str) -> None:
        e = self.entries[key]
        e["expires"] = self.clock() + e["ttl"]

    def put(self, key: str, ttl: float, **extra) -> None:
        now = self.clock()
        old = self.entries.get(key)
        if old is not None and old["available"] <= now < old["expires"]:
            old["expires"] = max(old["expires"], now + ttl)
            return
        self.entries[key] = {"available": now, "expires": now + ttl, "ttl": ttl, **extra}


def _anthropic_segments(req: dict) -> list[tuple[str, dict | None]]:
    """The request in cache order (tools, system, messages) as (canonical text, cache_control)."""
    out: list[tuple[str, dict | None]] = []
    for t in req.get("tools") or []:
        t = dict(t)
        out.append((json.dumps({k: v for k, v in t.items() if k != "cache_control"}, sort_keys=True),
                    t.get("cache_control")))
    system = req.get("system")
    if isinstance(system, str):
        out.append((system, None))
    for b in system or [] if isinstance(system, list) else []:
        out.append((b.get("text", ""), b.get("cache_control")))
    for m in req.get("messages") or []:
        content = m.get("content")
        if isinstance(content, str):
            out.append((f"[{m.get('role')}]" + content, None))
            continue
        for b in content or []:
            body = {k: v for k, v in b.items() if k != "cache_control"}
            txt = body.get("text") if body.get("type") == "text" else json.dumps(body, sort_keys=True)
            out.append((f"[{m.get('role')}]" + (txt or ""), b.get("cache_control")))
    return out


def _anthropic_breakpoints(req: dict) -> list[dict]:
    out, chars, h = [], 0, hashlib.sha256()
    h.update(str(req.get("model")).encode())
    for txt, cc in _anthropic_segments(req):
        h.update(txt.encode("utf-8", "replace") + b"\0")
        chars += len(txt)
        if cc:
            out.append({"key": h.hexdigest(), "tokens": int(chars / CHARS_PER_TOKEN), "ttl": cc.get("ttl") or "5m"})
    out_total = int(chars / CHARS_PER_TOKEN)
    for b in out:
        b["total"] = out_total
    return out


def _responses_segments(req: dict) -> list[tuple[str, dict | None]]:
    """A Responses request in cache order (tools, instructions, input) as (text, the content
    part's ``prompt_cache_breakpoint``)."""
    out: list[tuple[str, dict | None]] = [(json.dumps(t, sort_keys=True), None) for t in req.get("tools") or []]
    out.append((req.get("instructions") or "", None))
    for item in req.get("input") or [] if isinstance(req.get("input"), list) else [req.get("input") or ""]:
        if isinstance(item, str):
            out.append((item, None))
            continue
        content = item.get("content")
        if isinstance(content, list):
            out += [(c.get("text", ""), c.get("prompt_cache_breakpoint")) if isinstance(c, dict) else (str(c), None)
                    for c in content]
        elif isinstance(content, str):
            out.append((content, None))
        else:
            out.append((json.dumps(item, sort_keys=True), None))
    return out


def _openai_flat(req: dict) -> str:
    return "\x1e".join(t for t, _ in _responses_segments(req))


def _openai_breakpoints(req: dict) -> list[tuple[str, str | None]]:
    """The prefixes a gpt-5.6+ request caches at, in order: each explicit ``prompt_cache_breakpoint``
    (the exact end of its content part) and, unless ``prompt_cache_options.mode`` is ``explicit``,
    the one implicit breakpoint (taken here as the end of the whole prompt, the only place the
    docs leave certain), as (prefix text, ttl or None for the request's)."""
    segs = _responses_segments(req)
    out, acc = [], []
    for text, bp in segs:
        acc.append(text)
        if isinstance(bp, dict):
            out.append(("\x1e".join(acc), bp.get("ttl")))
    mode = (req.get("prompt_cache_options") or {}).get("mode", "implicit")
    explicit = out[-80:]                      # matching considers the latest 80 breakpoints
    if mode != "explicit":
        explicit.append(("\x1e".join(acc), None))
    return explicit


# ---------------------------------------------------------------------------- rendering

def _anthropic_usage(r: Reply, req: dict, sim: dict) -> dict:
    usage: dict[str, Any] = {"input_tokens": r.input_tokens if r.input_tokens is not None else sim["input"],
                             "output_tokens": r.output_tokens}
    if r.input_tokens is not None:        # the reply gives the tokens: no cache unless it says so too
        sim = {**sim, "read": 0, "write_5m": 0, "write_1h": 0}
    if r.cache_read is not None or r.cache_write is not None or r.cache_write_1h is not None:
        five, hour = r.cache_write or 0, r.cache_write_1h or 0
        usage["cache_read_input_tokens"] = r.cache_read or 0
        usage["cache_creation_input_tokens"] = five + hour
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": five, "ephemeral_1h_input_tokens": hour}
    else:
        usage["cache_read_input_tokens"] = sim["read"]
        usage["cache_creation_input_tokens"] = sim["write_5m"] + sim["write_1h"]
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": sim["write_5m"],
                                   "ephemeral_1h_input_tokens": sim["write_1h"]}
    thinks = (req.get("thinking") or {}).get("type") in ("enabled", "adaptive") or bool(r.thoughts)
    if r.reasoning_tokens is not None or thinks:
        usage["output_tokens_details"] = {"thinking_tokens": r.reasoning_tokens if r.reasoning_tokens is not None
                                          else (r.output_tokens // 2 if thinks else 0)}
    return usage


def _answer_text(r: Reply, req: dict, offered: bool) -> str | None:
    """A tool reply's text where the request offers no tool (the answer format)."""
    if r.kind == "tool" and not offered:
        return fenced_answer(r.payload)
    if r.kind == "raw_arguments" and not offered:
        return str(r.payload)
    return None


def _anthropic_content(r: Reply, req: dict) -> tuple[list[dict], str]:
    """The content blocks and stop reason of a tool/text reply."""
    content: list[dict] = []
    for t in r.thoughts:
        content.append({"type": "thinking", "thinking": t[1], "signature": t[2]} if t[0] == "thinking"
                       else {"type": "redacted_thinking", "data": t[1]})
    offered = bool(req.get("tools"))
    as_text = _answer_text(r, req, offered)
    if r.kind in ("tool", "raw_arguments") and as_text is None:
        if r.note:
            content.append({"type": "text", "text": r.note})
        tool_input = r.payload
        if r.cut and isinstance(tool_input, dict):
            tool_input = {k: _cut(v) if isinstance(v, str) else v for k, v in list(tool_input.items())[:1]}
        content.append({"type": "tool_use", "id": f"toolu_loop_{next(_ids)}", "name": "submit_kernel",
                        "input": tool_input})
        stop = "tool_use"
    else:
        body = as_text if as_text is not None else r.payload
        content.append({"type": "text", "text": _cut(body) if r.cut else body})
        stop = "end_turn"
    return content, ("max_tokens" if r.cut else stop)


def _render_anthropic(r: Reply, req: dict, sim: dict) -> tuple[int, Any]:
    model = req.get("model", "unknown") if isinstance(req, dict) else "unknown"
    if r.kind in ("tool", "raw_arguments", "text"):
        base = {"id": f"msg_loop_{next(_ids)}", "type": "message", "role": "assistant", "model": model,
                "stop_sequence": None, "usage": _anthropic_usage(r, req, sim)}
        content, stop = _anthropic_content(r, req)
        stop = {"refusal": "refusal", "context": "model_context_window_exceeded"}.get(r.stop or "", stop)
        return 200, {**base, "content": content, "stop_reason": stop}
    if r.kind == "error":
        etype = _ERROR_TYPES.get(r.status, "api_error")
        return r.status, {"type": "error", "error": {"type": etype, "message": r.payload},
                          "request_id": f"req_loop_{next(_ids)}"}
    return r.status, r.payload


def _pieces(text: str, n: int = 3) -> list[str]:
    step = max(1, -(-len(text) // n))
    return [text[i:i + step] for i in range(0, len(text), step)] or [""]


def _anthropic_events(r: Reply, req: dict, sim: dict) -> list[tuple[str, dict]]:
    """A tool/text reply as Anthropic's server-sent events."""
    status, message = _render_anthropic(r, req, sim)
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


def _openai_usage(r: Reply, req: dict, sim: dict, local: bool) -> dict:
    total_in = r.input_tokens if r.input_tokens is not None else sim["total"]
    usage: dict[str, Any] = {"prompt_tokens": total_in, "completion_tokens": r.output_tokens,
                             "total_tokens": total_in + r.output_tokens}
    if r.cache_read is not None or r.cache_write is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": r.cache_read or 0}
        if r.cache_write is not None:
            usage["prompt_tokens_details"]["cache_write_tokens"] = r.cache_write
    elif not local and r.input_tokens is None:
        usage["prompt_tokens_details"] = {"cached_tokens": sim["read"], "cache_write_tokens": sim["write"]}
    if r.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": r.reasoning_tokens}
    return usage


def _openai_message(r: Reply, req: dict) -> tuple[dict, str]:
    if r.stop == "filter":
        return {"role": "assistant", "content": None}, "content_filter"
    if r.stop == "refusal":
        return {"role": "assistant", "content": None, "refusal": "I can't help with that."}, "stop"
    as_text = _answer_text(r, req, bool(req.get("tools")))
    if r.kind in ("tool", "raw_arguments") and as_text is None:
        arguments = json.dumps(r.payload) if r.kind == "tool" else r.payload
        if r.cut:
            arguments = _cut(arguments)
        message = {"role": "assistant", "content": r.note,
                   "tool_calls": [{"id": f"call_loop_{next(_ids)}", "type": "function",
                                   "function": {"name": "submit_kernel", "arguments": arguments}}]}
        return message, "length" if r.cut else "tool_calls"
    body = as_text if as_text is not None else r.payload
    return {"role": "assistant", "content": _cut(body) if r.cut else body}, "length" if r.cut else "stop"


def _render_openai(r: Reply, req: dict, sim: dict, local: bool) -> tuple[int, Any]:
    model = req.get("model", "unknown") if isinstance(req, dict) else "unknown"
    if r.kind in ("tool", "raw_arguments", "text"):
        base = {"id": f"chatcmpl-loop-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
                "model": model, "usage": _openai_usage(r, req, sim, local)}
        message, finish = _openai_message(r, req)
        return 200, {**base, "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if r.kind == "error":
        etype = _ERROR_TYPES.get(r.status, "api_error")
        return r.status, {"error": {"message": r.payload, "type": etype, "param": None, "code": None}}
    return r.status, r.payload


def _openai_events(r: Reply, req: dict, sim: dict, local: bool) -> list[tuple[str | None, Any]]:
    """A tool/text reply as OpenAI's streamed ``chat.completion.chunk`` objects."""
    model = req.get("model", "unknown")
    cid, created = f"chatcmpl-loop-{next(_ids)}", int(time.time())

    def chunk(choices, **extra):
        return (None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": choices, **extra})

    message, finish = _openai_message(r, req)
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
        out.append(chunk([], usage=_openai_usage(r, req, sim, local)))
    out.append((None, "[DONE]"))
    return out


def _responses_usage(r: Reply, req: dict, sim: dict) -> dict:
    total_in = r.input_tokens if r.input_tokens is not None else sim["total"]
    if r.cache_read is not None or r.cache_write is not None or r.cache_write_1h is not None:
        read, w30, w12 = r.cache_read or 0, r.cache_write or 0, r.cache_write_1h or 0
    elif r.input_tokens is not None:      # the reply gives the tokens: no cache unless it says so too
        read, w30, w12 = 0, 0, 0
    else:
        read, w30, w12 = sim["read"], sim["write_short"], sim["write_long"]
    effort = (req.get("reasoning") or {}).get("effort")
    thinks = effort not in (None, "none") or bool(r.thoughts)
    reasoning = r.reasoning_tokens if r.reasoning_tokens is not None else (r.output_tokens // 2 if thinks else 0)
    details: dict[str, Any] = {"cached_tokens": read, "cache_write_tokens": w30 + w12}
    if sim.get("ttl_details"):
        details["cache_write_tokens_details"] = {"ttl_30m_tokens": w30, "ttl_12h_tokens": w12}
    return {"input_tokens": total_in, "input_tokens_details": details, "output_tokens": r.output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning}, "total_tokens": total_in + r.output_tokens}


def _render_responses(r: Reply, req: dict, sim: dict) -> tuple[int, Any]:
    model = req.get("model", "unknown") if isinstance(req, dict) else "unknown"
    if r.kind == "error":
        etype = _ERROR_TYPES.get(r.status, "api_error")
        return r.status, {"error": {"message": r.payload, "type": etype, "param": None, "code": None}}
    if r.kind not in ("tool", "raw_arguments", "text"):
        return r.status, r.payload
    output: list[dict] = []
    effort = (req.get("reasoning") or {}).get("effort")
    if r.thoughts or effort not in (None, "none"):
        item = {"type": "reasoning", "id": f"rs_loop_{next(_ids)}",
                "summary": [{"type": "summary_text", "text": t[1]} for t in r.thoughts if t[0] == "thinking"]}
        if "reasoning.encrypted_content" in (req.get("include") or []):
            item["encrypted_content"] = "gAAAA" + hashlib.sha256(item["id"].encode()).hexdigest()
        output.append(item)
    as_text = _answer_text(r, req, bool(req.get("tools")))
    if r.stop == "refusal":
        output.append({"type": "message", "id": f"msg_loop_{next(_ids)}", "role": "assistant", "status": "completed",
                       "content": [{"type": "refusal", "refusal": "I can't help with that."}]})
    elif r.kind in ("tool", "raw_arguments") and as_text is None:
        if r.note:
            output.append({"type": "message", "id": f"msg_loop_{next(_ids)}", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": r.note, "annotations": []}]})
        arguments = json.dumps(r.payload) if r.kind == "tool" else r.payload
        output.append({"type": "function_call", "id": f"fc_loop_{next(_ids)}", "call_id": f"call_loop_{next(_ids)}",
                       "name": "submit_kernel", "arguments": _cut(arguments) if r.cut else arguments,
                       "status": "incomplete" if r.cut else "completed"})
    else:
        body = as_text if as_text is not None else r.payload
        output.append({"type": "message", "id": f"msg_loop_{next(_ids)}", "role": "assistant",
                       "status": "incomplete" if r.cut else "completed", "phase": "final_answer",
                       "content": [{"type": "output_text", "text": _cut(body) if r.cut else body, "annotations": []}]})
    incomplete = "max_output_tokens" if r.cut else ("content_filter" if r.stop == "filter" else None)
    return 200, {"id": f"resp_loop_{next(_ids)}", "object": "response", "created_at": int(time.time()),
                 "model": model, "status": "incomplete" if incomplete else "completed",
                 "incomplete_details": {"reason": incomplete} if incomplete else None,
                 "error": None, "output": output, "usage": _responses_usage(r, req, sim),
                 "instructions": req.get("instructions"), "parallel_tool_calls": True,
                 "tool_choice": req.get("tool_choice", "auto"), "tools": req.get("tools", []),
                 "max_output_tokens": req.get("max_output_tokens"), "store": req.get("store", True),
                 "reasoning": req.get("reasoning"), "prompt_cache_key": req.get("prompt_cache_key")}


def _responses_events(r: Reply, req: dict, sim: dict) -> list[tuple[str, dict]]:
    status, resp = _render_responses(r, req, sim)
    seq = itertools.count()
    shell = {**resp, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    events = [("response.created", {"type": "response.created", "response": shell, "sequence_number": next(seq)}),
              ("response.in_progress", {"type": "response.in_progress", "response": shell,
                                        "sequence_number": next(seq)})]
    for i, item in enumerate(resp["output"]):
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": i,
                                                      "item": {**item, "status": "in_progress"},
                                                      "sequence_number": next(seq)}))
        if item["type"] == "message" and item["content"][0]["type"] == "output_text":
            for p in _pieces(item["content"][0]["text"]):
                events.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                              "output_index": i, "content_index": 0, "delta": p,
                                                              "logprobs": [], "sequence_number": next(seq)}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i,
                                                     "item": item, "sequence_number": next(seq)}))
    final = "response.incomplete" if resp["status"] == "incomplete" else "response.completed"
    events.append((final, {"type": final, "response": resp, "sequence_number": next(seq)}))
    return events


def _fault(path: str, events: list, r: Reply) -> list:
    """``events`` cut at their middle (after Anthropic's ``message_start``, with its usage), then the
    fault ``r.fault`` names in the route's own format (see :meth:`Reply.fails_midstream`)."""
    what, etype, message = r.fault
    kept = events[:max(2, len(events) // 2)]
    if what == "drop":
        return kept
    if path == ANTHROPIC:
        return kept + [("error", {"type": "error", "error": {"type": etype, "message": message},
                                  "request_id": f"req_loop_{next(_ids)}"})]
    if path == RESPONSES:
        seq = len(kept)
        if what == "failed":
            final = dict(events[-1][1]["response"])
            usage = final.get("usage") or {}
            final.update(status="failed", output=[], incomplete_details=None,
                         error={"code": etype, "message": message},
                         usage={**usage, "output_tokens": usage.get("output_tokens", 0) // 2,
                                "output_tokens_details": {"reasoning_tokens": 0}})
            return kept + [("response.failed", {"type": "response.failed", "response": final, "sequence_number": seq})]
        return kept + [("error", {"type": "error", "code": etype, "message": message, "param": None,
                                  "sequence_number": seq})]
    return kept + [(None, {"error": {"message": message, "type": etype, "param": None, "code": None}})]


def closed_port_url() -> str:
    """``http://127.0.0.1:PORT`` where nothing listens (a port just bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class Loopback:
    def __init__(self, *, start_delay: float = 0.05) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Reply]] = {ANTHROPIC: deque(), OPENAI: deque(), RESPONSES: deque(),
                                                 OPENAI_ANY: deque()}
        self.received: list[Received] = []
        self.unscripted: list[Received] = []
        self.rejected: list[Rejected] = []
        #: requests the installed SDK's request types do not allow (also in ``rejected``); the
        #: fixture fails a test that leaves any, unless it sets ``expect_invalid``
        self.invalid: list[Rejected] = []
        self.expect_invalid = False
        #: seconds from a request's arrival to its response's start (when the cache it writes becomes readable)
        self.start_delay = start_delay
        self._offset = 0.0
        self.cache = PromptCache(self.now)
        self._openai_prompts: dict[str, list[dict]] = {}
        self._stored: set[str] = set()
        self.local_chat = True               # the chat route answers as a local server (totals only)
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def now(self) -> float:
        return time.monotonic() + self._offset

    def advance(self, seconds: float) -> None:
        """Move the prompt cache's clock on (entries expire as if that time had passed)."""
        with self._lock:
            self._offset += seconds

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
        paths = (OPENAI, RESPONSES) if path == OPENAI_ANY else (path,)
        with self._lock:
            return [r for r in self.received if r.path in paths]

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
        return self.url + "/v1"                 # the SDK appends /chat/completions or /responses

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> "Loopback":
        warm()                                  # the SDK types resolved once, before any request waits on it
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

    # -- the provider's side ----------------------------------------------------------------
    def _invalid(self, path: str, req) -> tuple[int, dict] | None:
        """A 400 for a body the installed SDK's request type does not allow (tests/support/sdk_types.py)."""
        route = {ANTHROPIC: "anthropic", RESPONSES: "responses", OPENAI: "chat"}[path]
        found = check_request(route, req)
        if not found:
            return None
        message = f"loopback: the request is not a valid {route} request for the installed SDK: " + "; ".join(found)
        model = str(req.get("model")) if isinstance(req, dict) else "?"
        with self._lock:
            self.invalid.append(Rejected(path, model, message, req))
            self.rejected.append(Rejected(path, model, message, req))
        if path == ANTHROPIC:
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": message},
                         "request_id": f"req_loop_{next(_ids)}"}
        return 400, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}

    def _reject(self, path: str, req: dict) -> tuple[int, dict] | None:
        if path == ANTHROPIC:
            message = _check_anthropic(req)
            if message is None:
                return None
            body = {"type": "error", "error": {"type": "invalid_request_error", "message": message},
                    "request_id": f"req_loop_{next(_ids)}"}
        elif path == RESPONSES:
            with self._lock:
                stored = set(self._stored)
            found = _check_responses(req, stored)
            if found is None:
                return None
            message, param, code = found
            body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
        else:
            return None
        with self._lock:
            self.rejected.append(Rejected(path, str(req.get("model")), message, req))
        return 400, body

    def _simulate(self, path: str, req: dict) -> tuple[dict, list]:
        """Token counts of a request against the cache, and the entries it writes once it starts."""
        if path == ANTHROPIC:
            minimum = anthropic_cache_minimum(req.get("model"))
            bps = _anthropic_breakpoints(req)
            total = tokens_of("".join(t for t, _ in _anthropic_segments(req)))
            read_upto, writes = 0, []
            with self.cache.lock:
                for i in range(len(bps) - 1, -1, -1):
                    if bps[i]["tokens"] >= minimum and self.cache.readable(bps[i]["key"]):
                        read_upto = bps[i]["tokens"]
                        self.cache.touch(bps[i]["key"])
                        bps = bps[i + 1:]
                        break
            w5 = w1 = 0
            last = read_upto
            for b in bps:
                if b["tokens"] >= minimum and b["tokens"] > last:
                    span = b["tokens"] - last
                    if b["ttl"] == "1h":
                        w1 += span
                    else:
                        w5 += span
                    last = b["tokens"]
                    writes.append((b["key"], TTL.get(b["ttl"], 300.0)))
            sim = {"input": max(0, total - last), "read": read_upto, "write_5m": w5, "write_1h": w1}
            return sim, [("anthropic", w) for w in writes]
        flat = _openai_flat(req) if path == RESPONSES else json.dumps(req.get("messages"), sort_keys=True)
        total = tokens_of(flat)
        if path == OPENAI and self.local_chat:
            return {"total": total, "read": 0, "write": 0}, []
        key = f"{req.get('model')}\0{req.get('prompt_cache_key')}"
        ttl = (req.get("prompt_cache_options") or {}).get("ttl") or "30m"
        if path == RESPONSES and openai_breakpoint_cache(req.get("model")):
            return self._simulate_breakpoints(req, key, total, ttl)
        read = 0
        with self.cache.lock:
            for e in self._openai_prompts.get(key, []):
                if e["available"] <= self.now() < e["expires"]:
                    lcp = os.path.commonprefix([e["text"], flat])
                    tokens = tokens_of(lcp)
                    tokens = (tokens // 128) * 128 if tokens >= OPENAI_CACHE_MINIMUM else 0
                    if tokens > read:
                        read = tokens
                        e["expires"] = self.now() + e["ttl"]
        cacheable = total >= OPENAI_CACHE_MINIMUM
        written = max(0, total - read) if cacheable else 0
        long = ttl == "12h"
        sim = {"total": total, "read": read, "write": written, "write_short": 0 if long else written,
               "write_long": written if long else 0, "ttl_details": False}
        return sim, ([("openai", (key, flat, TTL[ttl]))] if cacheable else [])

    def _simulate_breakpoints(self, req: dict, key: str, total: int, ttl: str) -> tuple[dict, list]:
        """GPT-5.6 and later (the openai SDK 3.60 docstrings of ``PromptCacheOptions`` and
        ``PromptCacheBreakpoint``): a prefix is cached exactly at a breakpoint, not rounded to a token
        block; a request reads the longest of its breakpoints' prefixes that is cached, and writes
        up to four of its breakpoints (the implicit one and the latest three explicit ones, or the
        latest four explicit ones in ``explicit`` mode), from 1,024 tokens."""
        bps = _openai_breakpoints(req)
        explicit_mode = (req.get("prompt_cache_options") or {}).get("mode") == "explicit"
        read = 0
        with self.cache.lock:
            now = self.now()
            for text, _ in bps:
                e = self._openai_prompts.get(key + "\0bp\0" + hashlib.sha256(text.encode()).hexdigest())
                if e and e[0]["available"] <= now < e[0]["expires"] and tokens_of(text) > read:
                    read = tokens_of(text)
                    e[0]["expires"] = now + e[0]["ttl"]
        writable = bps[-4:] if explicit_mode else [b for b in bps[:-1]][-3:] + bps[-1:]
        writes, spans, last = [], {"short": 0, "long": 0}, read
        for text, own_ttl in sorted(writable, key=lambda b: len(b[0])):
            tokens = tokens_of(text)
            if tokens < OPENAI_CACHE_MINIMUM or tokens <= read:
                continue
            life = own_ttl or ttl
            writes.append(("openai-bp", (key + "\0bp\0" + hashlib.sha256(text.encode()).hexdigest(), TTL[life])))
            if tokens > last:                 # the tokens up to each breakpoint are written at its lifetime
                spans["long" if life == "12h" else "short"] += tokens - last
                last = tokens
        sim = {"total": total, "read": read, "write": spans["short"] + spans["long"], "write_short": spans["short"],
               "write_long": spans["long"], "ttl_details": True}
        return sim, writes

    def _commit(self, writes: list) -> None:
        """The response has started: what it wrote to the cache is readable from now on."""
        with self.cache.lock:
            for kind, w in writes:
                if kind == "anthropic":
                    self.cache.put(w[0], w[1])
                elif kind == "openai-bp":
                    k, ttl = w
                    now = self.now()
                    old = self._openai_prompts.get(k)
                    if old and old[0]["available"] <= now < old[0]["expires"]:
                        old[0]["expires"] = max(old[0]["expires"], now + ttl)
                    else:
                        self._openai_prompts[k] = [{"available": now, "expires": now + ttl, "ttl": ttl}]
                else:
                    key, flat, ttl = w
                    now = self.now()
                    self._openai_prompts.setdefault(key, []).append(
                        {"text": flat, "available": now, "expires": now + ttl, "ttl": ttl})

    def _limit(self, path: str, req: dict) -> int | None:
        if path == ANTHROPIC:
            return req.get("max_tokens")
        if path == RESPONSES:
            return req.get("max_output_tokens")
        return req.get("max_completion_tokens") or req.get("max_tokens")

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
        request = body if isinstance(body, dict) else {}
        with self._lock:
            self.received.append(rec)
        rejected = None
        if path in (ANTHROPIC, RESPONSES, OPENAI) and h.command == "POST":
            rejected = self._invalid(path, body) or self._reject(path, request)
        reply = None
        if rejected is None:
            with self._lock:
                queue = self._queues.get(path)
                if not queue and path in (OPENAI, RESPONSES):
                    queue = self._queues[OPENAI_ANY]
                reply = queue.popleft() if queue else None
                if reply is None:
                    self.unscripted.append(rec)
        headers: dict = {}
        if rejected is not None:
            status, payload = rejected
        elif reply is None:
            status, payload = 501, {"error": {"message": f"loopback: nothing scripted for {path}",
                                              "type": "loopback"}}
        else:
            if reply.delay and self._stop.wait(reply.delay):
                return                          # shutting down: drop the reply
            sim, writes = self._simulate(path, request) if reply.kind in ("tool", "raw_arguments", "text") else ({}, [])
            limit = self._limit(path, request)
            if limit is not None and reply.output_tokens > limit and not reply.cut:
                reply = replace(reply, cut=True, output_tokens=limit)     # cut off at the output limit
            if writes and self.start_delay and self._stop.wait(self.start_delay):
                return
            self._commit(writes)
            if request.get("stream") and reply.kind in ("tool", "raw_arguments", "text"):
                if path == ANTHROPIC:
                    events = _anthropic_events(reply, request, sim)
                elif path == RESPONSES:
                    events = _responses_events(reply, request, sim)
                    if request.get("store", True):
                        with self._lock:
                            self._stored.add(events[-1][1]["response"]["id"])
                else:
                    events = _openai_events(reply, request, sim, self.local_chat)
                if reply.fault:
                    events = _fault(path, events, reply)
                ping = {ANTHROPIC: b'event: ping\ndata: {"type": "ping"}\n\n',
                        RESPONSES: b'event: keepalive\ndata: {"type": "keepalive", "sequence_number": 0}\n\n'}
                self._stream(h, events, reply, ping=ping.get(path, b": keepalive\n\n"))
                return
            if path == ANTHROPIC:
                status, payload = _render_anthropic(reply, request, sim)
            elif path == RESPONSES:
                status, payload = _render_responses(reply, request, sim)
                if status == 200 and request.get("store", True):
                    with self._lock:
                        self._stored.add(payload["id"])
            else:
                status, payload = _render_openai(reply, request, sim, self.local_chat)
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

    def _stream(self, h: BaseHTTPRequestHandler, events, reply: Reply, ping: bytes = b": keepalive\n\n") -> None:
        """Server-sent events, ``reply.gap`` seconds apart (with the keepalive frame ``ping`` every
        ``reply.ping`` seconds meanwhile: Anthropic's ``ping`` event, the Responses ``keepalive``
        event, an SSE comment on Chat Completions), then close the connection."""
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
                if i and reply.gap and reply.ping:
                    waited = 0.0
                    while waited < reply.gap and not self._stop.is_set():
                        step = min(reply.ping, reply.gap - waited)
                        self._stop.wait(step)
                        waited += step
                        if waited < reply.gap:
                            h.wfile.write(ping)
                            h.wfile.flush()
                    if self._stop.is_set():
                        break
                elif i and reply.gap and self._stop.wait(reply.gap):
                    break
                text_ = data if isinstance(data, str) else json.dumps(data)
                frame = (f"event: {name}\n" if name else "") + f"data: {text_}\n\n"
                h.wfile.write(frame.encode())
                h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            pass
        h.close_connection = True
