"""What a model accepts, from the shipped capability table (``kernel_forge/data/models.json``).

Each entry says, with its sources: which API it speaks (Anthropic Messages, OpenAI Responses, or
Chat Completions for OpenAI-compatible servers), its thinking modes (``none`` / ``budget`` /
``adaptive`` / ``always``) and effort values, whether it takes a temperature and a forced tool
choice, the name of its output-limit field, its output and context limits, its minimum cacheable
prompt and cache lifetimes, and its prices.  The proposers build every request from it, so the
first request to a model is the right one; a model the table does not know gets the provider's
safe defaults (``_defaults``), and the relaxation rules (an HTTP 400 naming a parameter) stay as
the fallback.

Local servers: ``server`` names the entry (``vllm``, ``llama.cpp``, ``ollama``, ``sglang``);
``auto`` (the default) takes the generic ``openai-compatible`` entry for a model the table does not
know behind a ``--base-url``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

THINKING_MODES = ("none", "budget", "adaptive", "always")
ALLOWANCES = ("always", "without_thinking", "never")
APIS = ("messages", "responses", "chat")
SERVERS = ("auto", "vllm", "llama.cpp", "ollama", "sglang")
#: a model id that extends a table key by one of these is that key's model (a dated snapshot)
_SUFFIX = re.compile(r"^-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest|v\d+(?::\d+)?)$")
#: the default output limit where thinking is on: room for the thinking and a whole kernel
THINKING_OUTPUT = 32000
#: ... and where it is off: a whole kernel with its explanation
PLAIN_OUTPUT = 16000


@dataclass(frozen=True)
class Capabilities:
    """One model's entry (or the defaults it fell back to)."""

    key: str                                  # "anthropic:claude-opus-5-5", or "_defaults.anthropic"
    known: bool                               # False: the provider's safe defaults
    api: str
    thinking_modes: tuple[str, ...]
    thinking_off: str | None
    effort: tuple[str, ...]
    default_effort: str | None
    temperature: str
    forced_tool_choice: str
    limit_field: str
    max_output: int
    context: int
    min_cache_tokens: int | None
    cache: str
    cache_ttls: tuple[str, ...]
    status: str = ""
    unverified: tuple[str, ...] = ()
    source: dict = field(default_factory=dict, compare=False)

    # -- what a request may carry ---------------------------------------------------------------
    @property
    def thinks_always(self) -> bool:
        return "always" in self.thinking_modes

    @property
    def can_think(self) -> bool:
        return bool({"budget", "adaptive", "always"} & set(self.thinking_modes))

    def accepts_temperature(self, thinking: bool) -> bool:
        return self.temperature == "always" or (self.temperature == "without_thinking" and not thinking)

    def forced_tool_ok(self, thinking: bool) -> bool:
        return self.forced_tool_choice == "always" or (self.forced_tool_choice == "without_thinking" and not thinking)

    def best_effort(self, wanted: str | None) -> str | None:
        """The effort to send: ``wanted`` if the model takes it, else the highest value it takes
        at or below ``wanted`` (``max`` -> ``xhigh`` -> ``high`` ...); ``None`` where it takes none."""
        if not self.effort:
            return None
        if wanted is None:
            return None
        order = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
        if wanted in self.effort:
            return wanted
        rank = order.index(wanted) if wanted in order else order.index("high")
        below = [e for e in self.effort if e in order and order.index(e) <= rank]
        return max(below, key=order.index) if below else min(self.effort, key=lambda e: order.index(e) if e in order else 99)

    def default_output(self, thinking: bool) -> int:
        """Output tokens to ask for when none is configured: thinking plus a kernel, within the model's limit."""
        return min(self.max_output, THINKING_OUTPUT if thinking else PLAIN_OUTPUT)

    def is_verified(self, name: str) -> bool:
        """Whether ``name`` (a field, or ``prices.X``) was checked against a source (not an assumption)."""
        return name not in self.unverified and name.split(".")[0] not in self.unverified

    def to_json(self) -> dict:
        return {"key": self.key, "known": self.known, "api": self.api, "thinking_modes": list(self.thinking_modes),
                "effort": list(self.effort), "temperature": self.temperature,
                "forced_tool_choice": self.forced_tool_choice, "limit_field": self.limit_field,
                "max_output": self.max_output, "context": self.context, "min_cache_tokens": self.min_cache_tokens,
                "cache": self.cache, "cache_ttls": list(self.cache_ttls)}


def _data() -> dict:
    text = resources.files("kernel_forge").joinpath("data/models.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped table as read (models, defaults, sources, multipliers)."""
    return _data()


def _build(key: str, entry: dict, known: bool) -> Capabilities:
    return Capabilities(
        key=key, known=known, api=entry["api"], thinking_modes=tuple(entry["thinking_modes"]),
        thinking_off=entry.get("thinking_off"), effort=tuple(entry.get("effort") or ()),
        default_effort=entry.get("default_effort"), temperature=entry["temperature"],
        forced_tool_choice=entry["forced_tool_choice"], limit_field=entry["limit_field"],
        max_output=int(entry["max_output"]), context=int(entry["context"]),
        min_cache_tokens=entry.get("min_cache_tokens"), cache=entry["cache"],
        cache_ttls=tuple(entry.get("cache_ttls") or ()), status=entry.get("status", ""),
        unverified=tuple(entry.get("unverified") or ()), source=dict(entry.get("source") or {}))


@lru_cache(maxsize=1)
def entries() -> dict[str, Capabilities]:
    """Every listed model, keyed ``provider:model`` (``local:SERVER`` for the servers)."""
    return {k.lower(): _build(k.lower(), v, True) for k, v in table()["models"].items()}


def checked() -> str:
    """The date the table was last checked against the providers' pages."""
    return table().get("_checked", "")


def sources() -> dict[str, str]:
    return dict(table().get("_sources", {}))


def lookup_key(provider: str, model: str, keys) -> str | None:
    """The table key for ``provider:model``: exact, else the longest key the id extends by a date
    suffix or ``-latest``; ``None`` if none."""
    want = f"{provider.strip().lower()}:{model.strip().lower()}"
    if want in keys:
        return want
    best = None
    for key in keys:
        if want.startswith(key) and _SUFFIX.match(want[len(key):]) and (best is None or len(key) > len(best)):
            best = key
    return best


def for_model(provider: str, model: str, *, base_url: str | None = None, server: str = "auto") -> Capabilities:
    """The capabilities kforge builds requests from for ``provider:model`` behind ``base_url``.

    An OpenAI model the table lists is taken as listed even behind a gateway's base URL; an
    unknown model behind a base URL is a local/compatible server (``server`` picks its entry);
    an unknown model on the provider's own endpoint gets the provider's safe defaults."""
    table_entries = entries()
    key = lookup_key(provider, model, table_entries)
    if key is not None:
        return table_entries[key]
    defaults = table()["_defaults"]
    if provider == "openai" and base_url:
        if server and server != "auto":
            local = table_entries.get(f"local:{server}")
            if local is None:
                from kernel_forge.common.errors import InputError
                raise InputError(f"--server {server!r}: not one of {', '.join(SERVERS)}")
            return local
        return _build("_defaults.openai-compatible", defaults["openai-compatible"], False)
    return _build(f"_defaults.{provider}", defaults[provider], False)
