"""How one request's prompt is split for the prompt cache (:class:`CachePlan`): the run's part,
the sections every proposal of the request shares, each proposal's own part; whether caching is
on (the prefix against the model's minimum), and the lifetime asked for the run's part."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from kernel_forge.proposers.base import ProposalRequest
from kernel_forge.proposers.capabilities import Capabilities

#: characters per token when sizing a prompt prefix against a cache minimum (a rough mean for
#: the mix of prose and code in kforge prompts; the table's minimums are in the provider's tokens)
PREFIX_CHARS_PER_TOKEN = 3.5
#: seconds of the short cache lifetimes, by name
TTL_SECONDS = {"5m": 300, "1h": 3600, "30m": 1800, "12h": 43200}


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


def plan_cache(request: ProposalRequest, n: int, *, system: str, name: str, caps: Capabilities, prompt_cache: bool,
               static_ttl: str | None) -> CachePlan:
    """The plan of ``request``'s ``n`` proposals to ``name`` (``system``: the system prompt as sent;
    ``static_ttl``: the lifetime for the run's part, where it has a breakpoint of its own)."""
    prompts = [request.prompt_for(i) for i in range(n)]
    common, rests = split_common(prompts)
    chars = len(system) + len(request.static_prefix) + len(common)
    tokens = int(chars / PREFIX_CHARS_PER_TOKEN)
    static_tokens = int((len(system) + len(request.static_prefix)) / PREFIX_CHARS_PER_TOKEN)
    minimum = caps.min_cache_tokens
    key = "kforge-" + hashlib.sha256((name + "\0" + system + "\0" + request.static_prefix)
                                     .encode("utf-8")).hexdigest()[:24]
    if not prompt_cache:
        on, reason = False, "prompt caching turned off (--no-prompt-cache)"
    elif caps.cache == "none" or minimum is None:
        on, reason = False, f"{caps.key} has no prompt cache kforge can use"
    elif tokens < minimum:
        on, reason = False, (f"the shared prefix is about {tokens} tokens, under {caps.key}'s minimum "
                             f"cacheable prompt of {minimum}")
    else:
        on, reason = True, f"the shared prefix is about {tokens} tokens (minimum {minimum})"
    # the run's part has a breakpoint of its own only where it clears the minimum by itself
    static_on = on and static_tokens >= (minimum or 0)
    if on and not static_on:
        reason += (f"; the run's part alone is about {static_tokens} tokens, under the minimum: no breakpoint "
                   "of its own (the shared prefix's breakpoint caches it within each iteration)")
    return CachePlan(on=on, reason=reason, static=request.static_prefix, common=common, rests=rests,
                     prefix_tokens=tokens, min_tokens=minimum, static_ttl=static_ttl if static_on else None, key=key,
                     static_tokens=static_tokens, static_on=static_on)


def static_ttl(caps: Capabilities, cache_ttl: str, interval: float | None) -> str | None:
    """The cache lifetime for the run's part of the prompt: the long one when asked (``cache_ttl``),
    or (auto) when the last iteration (``interval`` seconds) took longer than the short one lasts;
    None: the default."""
    ttls = caps.cache_ttls
    if len(ttls) < 2 or cache_ttl == "short":
        return None
    if cache_ttl == "long":
        return ttls[-1]
    short = TTL_SECONDS.get(ttls[0], 300)
    if interval is not None and interval > short - 30:
        return ttls[-1]
    return None
