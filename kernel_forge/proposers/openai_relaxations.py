"""The optional request parameters an OpenAI model or an OpenAI-compatible server may reject, in the
order they are tried (:func:`relaxations`): each found in an HTTP 400's message and the request sent
again without it (or, for the effort, with a value the message lists)."""
from __future__ import annotations

import copy
import re

from kernel_forge.proposers.options import choices
from kernel_forge.proposers.relaxation import WITHOUT_TEMPERATURE, Relaxation

LIMIT_FIELDS = choices("max_tokens_field")
_ORDER = choices("reasoning_effort")


def relaxations() -> list[Relaxation]:
    """What an OpenAI(-compatible) request may be sent again without."""
    unsupported = re.compile(r"unsupported|not supported|does not support|unrecognized|unknown|instead")
    return [
        WITHOUT_TEMPERATURE,
        Relaxation("effort_value", sent=lambda b: _effort_of(b) is not None,
                   named=lambda m: bool(re.search(r"reasoning[._]effort", m)) and "supported values" in m,
                   apply=lambda b: b, adapt=_supported_effort,
                   note="sent again with a reasoning effort the model lists"),
        Relaxation("reasoning_summary", sent=lambda b: "summary" in (b.get("reasoning") or {}),
                   named=lambda m: "summary" in m,
                   apply=_without_summary,
                   note="sent again without reasoning.summary"),
        Relaxation("reasoning", sent=lambda b: _effort_of(b) is not None,
                   named=lambda m: bool(re.search(r"reasoning", m)) and bool(unsupported.search(m)),
                   apply=_without_reasoning,
                   note="sent again without reasoning (the model is not a reasoning model)"),
        Relaxation("max_tokens_field",
                   sent=lambda b: any(f in b for f in LIMIT_FIELDS),
                   named=lambda m: bool(unsupported.search(m)) and any(
                       re.search(rf"\b{f}\b", m) for f in LIMIT_FIELDS),
                   apply=_swap_limit_field,
                   note="sent again with the other output-limit field (max_tokens / max_completion_tokens)"),
        Relaxation("forced_tool_choice", sent=lambda b: isinstance(b.get("tool_choice"), dict),
                   named=lambda m: "tool_choice" in m,
                   apply=lambda b: {**copy.deepcopy(b), "tool_choice": "auto"},
                   note="sent again with tool_choice auto"),
        Relaxation("stream_options", sent=lambda b: "stream_options" in b,
                   named=lambda m: "stream_options" in m,
                   apply=lambda b: {k: v for k, v in b.items() if k != "stream_options"},
                   note="sent again without stream_options"),
        Relaxation("prompt_cache", sent=lambda b: "prompt_cache_key" in b or "prompt_cache_options" in b,
                   named=lambda m: "prompt_cache" in m,
                   apply=lambda b: {k: v for k, v in b.items()
                                    if k not in ("prompt_cache_key", "prompt_cache_options")},
                   note="sent again without prompt-cache parameters"),
    ]


def _effort_of(body: dict) -> str | None:
    if isinstance(body.get("reasoning"), dict):
        return body["reasoning"].get("effort")
    return body.get("reasoning_effort")


def _supported_effort(body: dict, message: str) -> dict:
    """``body`` with the effort stepped to the highest value the error message lists as supported
    at or below the one sent (the lowest listed if none is below)."""
    listed = [v for v in re.findall(r"'([a-z]+)'", message.lower().split("supported values", 1)[-1]) if v in _ORDER]
    sent = _effort_of(body) or "high"
    if not listed:
        return _without_reasoning(body)
    below = [v for v in listed if _ORDER.index(v) <= _ORDER.index(sent)] if sent in _ORDER else []
    pick = max(below, key=_ORDER.index) if below else min(listed, key=_ORDER.index)
    new = copy.deepcopy(body)
    if isinstance(new.get("reasoning"), dict):
        new["reasoning"]["effort"] = pick
        if pick == "none":
            new.pop("include", None)
            new["reasoning"].pop("summary", None)
    else:
        new["reasoning_effort"] = pick
    return new


def _without_summary(body: dict) -> dict:
    new = copy.deepcopy(body)
    new["reasoning"].pop("summary", None)
    return new


def _without_reasoning(body: dict) -> dict:
    return {k: v for k, v in body.items() if k not in ("reasoning", "reasoning_effort", "include")}


def _swap_limit_field(body: dict) -> dict:
    new = copy.deepcopy(body)
    for old, other in (("max_tokens", "max_completion_tokens"), ("max_completion_tokens", "max_tokens")):
        if old in new:
            new[other] = new.pop(old)
            break
    return new

