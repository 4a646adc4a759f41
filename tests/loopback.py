"""A scripted loopback HTTP server that answers as the providers' documented APIs do, for the real SDKs:

* Anthropic Messages: ``POST /v1/messages``
* OpenAI Responses: ``POST /v1/responses``
* OpenAI Chat Completions: ``POST /v1/chat/completions`` (what OpenAI-compatible servers speak)

**It checks every request against the model's entry in the capability table**
(``kernel_forge/data/models.json``) before it answers, and rejects what the provider documents
as rejected, with the provider's own HTTP 400 body: a forced ``tool_choice`` on a model that does
not allow it (or not with thinking on), ``thinking.type`` values the model does not take, a
``temperature`` where none is accepted, an effort value the model does not list, ``budget_tokens``
not below ``max_tokens``, an output limit above the model's maximum, more than four cache
breakpoints or a long-lived breakpoint after a short-lived one, a reasoning item sent back
without its encrypted content under ``store: false``, a ``previous_response_id`` that was never
stored.  A field the table marks ``unverified`` is not enforced.  Rejected requests are listed in
:attr:`Loopback.rejected` (each one is a 400 round trip a proposer should not have made) and do
not use up a scripted reply.

**Usage is the provider's own**: Anthropic ``input_tokens`` (uncached), ``cache_read_input_tokens``,
``cache_creation_input_tokens`` with ``cache_creation.ephemeral_5m/1h_input_tokens``,
``output_tokens`` and ``output_tokens_details.thinking_tokens``; OpenAI Responses ``input_tokens``,
``input_tokens_details.cached_tokens`` / ``cache_write_tokens``, ``output_tokens``,
``output_tokens_details.reasoning_tokens``; Chat Completions from a local server: only the
totals.  Input tokens are counted from the request (a character is a quarter of a token) unless a
reply gives them.

**The prompt cache is simulated from prefixes**: Anthropic caches the prefix up to each
``cache_control`` breakpoint that clears the model's minimum, with its lifetime (5 min or 1 h,
refreshed on a read); OpenAI caches each prompt and matches the longest common prefix in
128-token steps from 1,024 tokens, per ``prompt_cache_key``.  A cache entry becomes readable when
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

import pytest

from kernel_forge.proposers import capabilities as capabilities_module

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


def _caps(provider: str, model: str, path: str):
    """The table entry of a model (None: not listed, nothing is enforced)."""
    entries = capabilities_module.entries()
    key = capabilities_module.lookup_key(provider, model or "", entries)
    return entries.get(key) if key else None


def _enforced(caps, name: str) -> bool:
    return caps is not None and caps.is_verified(name)


# ---------------------------------------------------------------------------- request checks

def _check_anthropic(req: dict) -> str | None:
    """The 400 message Anthropic documents for this request, or None."""
    caps = _caps("anthropic", req.get("model"), ANTHROPIC)
    breakpoints = _anthropic_breakpoints(req)
    if len(breakpoints) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {len(breakpoints)}."
    ttls = [TTL.get(b["ttl"], 300.0) for b in breakpoints]
    if any(a < b for a, b in zip(ttls, ttls[1:])):
        return ("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block: "
                "cache entries with a longer TTL must appear before shorter ones")
    thinking = req.get("thinking") or {}
    kind = thinking.get("type")
    limit = req.get("max_tokens") or 0
    if kind == "enabled" and (thinking.get("budget_tokens") or 0) >= limit:
        return "`max_tokens` must be greater than `thinking.budget_tokens`."
    if caps is None:
        return None
    modes = set(caps.thinking_modes)
    thinks = kind in ("enabled", "adaptive") or (kind is None and "always" in modes)
    if _enforced(caps, "max_output") and _enforced(caps, "limits") and limit > caps.max_output:
        return f"max_tokens: {limit} > {caps.max_output}, which is the maximum allowed number of output tokens for {req.get('model')}"
    if _enforced(caps, "thinking_modes"):
        if kind == "enabled" and "budget" not in modes:
            return ('"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and '
                    '"output_config.effort" to control thinking behavior.')
        if kind == "adaptive" and not ({"adaptive", "always"} & modes):
            return '"thinking.type.adaptive" is not supported for this model. Use "thinking.type.enabled" with budget_tokens.'
        if kind in ("disabled", "between_tools") and _enforced(caps, "thinking_off") and (
                "always" in modes or caps.thinking_off != kind):
            return (f'"thinking.type.{kind}" is not supported for this model.'
                    + (' Use "thinking.type.between_tools" to turn off up-front thinking.'
                       if caps.thinking_off == "between_tools" else ""))
    effort = (req.get("output_config") or {}).get("effort")
    if effort is not None and _enforced(caps, "effort"):
        if not caps.effort:
            return "output_config.effort: effort is not supported for this model."
        if effort not in caps.effort:
            return (f"output_config.effort: '{effort}' is not supported for this model. Supported values: "
                    + ", ".join(caps.effort))
    if "temperature" in req and _enforced(caps, "temperature"):
        if caps.temperature == "never":
            return "`temperature` is deprecated for this model."
        if caps.temperature == "without_thinking" and thinks and req["temperature"] != 1:
            return "`temperature` may only be set to 1 when thinking is enabled."
    choice = (req.get("tool_choice") or {}).get("type")
    if choice in ("tool", "any") and _enforced(caps, "forced_tool_choice"):
        if caps.forced_tool_choice == "never":
            return 'tool_choice: type "tool" and "any" are not supported for this model.'
        if caps.forced_tool_choice == "without_thinking" and thinks:
            return "Thinking may not be enabled when tool_choice forces tool use."
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
    caps = _caps("openai", req.get("model"), RESPONSES)
    if caps is None:
        return None
    effort = (req.get("reasoning") or {}).get("effort")
    if effort is not None and _enforced(caps, "effort"):
        if not caps.effort:
            return ("Unsupported parameter: 'reasoning.effort' is not supported with this model.",
                    "reasoning.effort", "unsupported_parameter")
        if effort not in caps.effort:
            values = [f"'{e}'" for e in caps.effort]
            listed = ", ".join(values[:-1]) + f", and {values[-1]}" if len(values) > 1 else values[0]
            return (f"Unsupported value: 'reasoning.effort' does not support '{effort}' with this model. "
                    f"Supported values are: {listed}.", "reasoning.effort", "unsupported_value")
    thinking = effort not in (None, "none") or (effort is None and "always" in caps.thinking_modes)
    if "temperature" in req and _enforced(caps, "temperature") and not caps.accepts_temperature(thinking):
        return ("Unsupported parameter: 'temperature' is not supported with this model.", "temperature",
                "unsupported_parameter")
    limit = req.get("max_output_tokens")
    if limit is not None and _enforced(caps, "limits") and limit > caps.max_output:
        return (f"Invalid 'max_output_tokens': integer above maximum value. Expected a value <= {caps.max_output}, "
                f"but got {limit} instead.", "max_output_tokens", "integer_above_max_value")
    choice = req.get("tool_choice")
    if isinstance(choice, dict) and _enforced(caps, "forced_tool_choice") and not caps.forced_tool_ok(thinking):
        return ("Unsupported value: 'tool_choice' does not support forcing a function with this model.",
                "tool_choice", "unsupported_value")
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


def _openai_flat(req: dict) -> str:
    parts = [req.get("instructions") or ""]
    for item in req.get("input") or []:
        if isinstance(item, str):
            parts.append(item)
            continue
        content = item.get("content")
        if isinstance(content, list):
            parts += [c.get("text", "") if isinstance(c, dict) else str(c) for c in content]
        elif isinstance(content, str):
            parts.append(content)
        else:
            parts.append(json.dumps(item, sort_keys=True))
    for t in req.get("tools") or []:
        parts.insert(0, json.dumps(t, sort_keys=True))
    return "\x1e".join(parts)


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
    if r.kind in ("tool", "raw_arguments") and as_text is None:
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
                       "status": "incomplete" if r.cut else "completed",
                       "content": [{"type": "output_text", "text": _cut(body) if r.cut else body, "annotations": []}]})
    return 200, {"id": f"resp_loop_{next(_ids)}", "object": "response", "created_at": int(time.time()),
                 "model": model, "status": "incomplete" if r.cut else "completed",
                 "incomplete_details": {"reason": "max_output_tokens"} if r.cut else None,
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
        if item["type"] == "message":
            for p in _pieces(item["content"][0]["text"]):
                events.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                              "output_index": i, "content_index": 0, "delta": p,
                                                              "logprobs": [], "sequence_number": next(seq)}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i,
                                                     "item": item, "sequence_number": next(seq)}))
    final = "response.incomplete" if resp["status"] == "incomplete" else "response.completed"
    events.append((final, {"type": final, "response": resp, "sequence_number": next(seq)}))
    return events


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
            caps = _caps("anthropic", req.get("model"), path)
            minimum = caps.min_cache_tokens if caps is not None and caps.min_cache_tokens else 1024
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
        caps = _caps("openai", req.get("model"), path)
        key = f"{req.get('model')}\0{req.get('prompt_cache_key')}"
        read = 0
        with self.cache.lock:
            for e in self._openai_prompts.get(key, []):
                if e["available"] <= self.now() < e["expires"]:
                    lcp = os.path.commonprefix([e["text"], flat])
                    tokens = tokens_of(lcp)
                    tokens = (tokens // 128) * 128 if tokens >= 1024 else 0
                    if tokens > read:
                        read = tokens
                        e["expires"] = self.now() + e["ttl"]
        cacheable = total >= 1024
        written = max(0, total - read) if cacheable else 0
        ttl = (req.get("prompt_cache_options") or {}).get("ttl") or "30m"
        long = ttl == "12h"
        ttl_details = caps is not None and len(caps.cache_ttls) >= 2
        sim = {"total": total, "read": read, "write": written, "write_short": 0 if long else written,
               "write_long": written if long else 0, "ttl_details": ttl_details}
        return sim, ([("openai", (key, flat, TTL[ttl]))] if cacheable else [])

    def _commit(self, writes: list) -> None:
        """The response has started: what it wrote to the cache is readable from now on."""
        with self.cache.lock:
            for kind, w in writes:
                if kind == "anthropic":
                    self.cache.put(w[0], w[1])
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
        rejected = self._reject(path, request) if path in (ANTHROPIC, RESPONSES) else None
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
                self._stream(h, events, reply)
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
                text_ = data if isinstance(data, str) else json.dumps(data)
                frame = (f"event: {name}\n" if name else "") + f"data: {text_}\n\n"
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
