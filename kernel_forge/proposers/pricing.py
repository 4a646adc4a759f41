"""What a model call cost, from a shipped price table that a user config may override.

The table (``kernel_forge/data/pricing.json``) holds list prices in USD per million tokens, keyed
``"provider:model"``: ``input`` and ``output``, and the prompt-cache rates the providers bill
separately -- ``cache_read`` (Anthropic cache hits; OpenAI's "cached input", also accepted under
that name, ``cached_input``), ``cache_write`` (Anthropic 5-minute cache writes; OpenAI cache
writes where billed) and ``cache_write_1h`` (Anthropic 1-hour writes).  A rate an entry leaves
out comes from the provider's published multiplier of ``input`` (the table's ``_multipliers``:
Anthropic 0.1x reads, 1.25x 5-minute and 2x 1-hour writes); where a provider publishes no
multiplier (OpenAI) it is the plain input rate, which can overstate a cost but never understate it.

A dated model id (``claude-sonnet-4-5-20250929``, ``gpt-4o-2024-08-06``) or a ``-latest`` alias is
priced by the key it extends; the longest key wins (``gpt-5-mini-2025-08-07`` is ``gpt-5-mini``,
not ``gpt-5``).  A model the table does not know costs 0 with ``priced=False``, so evidence can
say "cost unknown" instead of "free" (and ``--budget-usd`` refuses to start with it).

The figures are transcribed list prices and go stale; the file's ``_source`` and ``_checked``
say where they come from and when.  Override or extend them with a mapping
``{"provider:model": {"input": X, "output": Y, ...}}`` (or ``[X, Y]``).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..errors import InputError

_SUFFIX = re.compile(r"^-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")
PER = 1_000_000
RATES = ("input", "output", "cache_read", "cache_write", "cache_write_1h")
ALIASES = {"cached_input": "cache_read"}          # OpenAI's name for a cache hit
_ACCEPTED = set(RATES) | set(ALIASES)


@dataclass(frozen=True)
class Price:
    """USD per million tokens for one ``provider:model`` key."""

    key: str
    input: float
    output: float
    cache_read: float | None = None       # None: the provider's multiplier of input (see rate())
    cache_write: float | None = None
    cache_write_1h: float | None = None
    source: str = "shipped"               # "shipped" | "override"

    def rate(self, name: str) -> float:
        """The USD-per-million rate of ``name``, a multiplier of ``input`` where none is given."""
        value = getattr(self, name)
        if value is not None:
            return value
        provider = self.key.partition(":")[0]
        return self.input * multipliers().get(provider, {}).get(name, 1.0)


@dataclass(frozen=True)
class Cost:
    usd: float
    priced: bool                     # False: the model is not in the table; usd is 0
    key: str | None = None           # the table key that priced it


def _number(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not math.isfinite(v):
        raise InputError(f"{where}: a price must be a non-negative number (USD per million tokens), got {v!r}")
    return float(v)


def _price_from(key: str, value: object, source: str, where: str) -> Price:
    if ":" not in key:
        raise InputError(f"{where}.{key}: price keys are 'provider:model', e.g. 'openai:gpt-5'")
    if isinstance(value, (list, tuple)) and len(value) == 2:
        value = {"input": value[0], "output": value[1]}
    if not isinstance(value, Mapping):
        raise InputError(f"{where}.{key}: a price is {{\"input\": X, \"output\": Y}} or [X, Y] "
                         f"(USD per million tokens), got {value!r}")
    unknown = set(value) - _ACCEPTED
    if unknown or not {"input", "output"} <= set(value):
        raise InputError(f"{where}.{key}: a price needs 'input' and 'output' and may add "
                         f"{', '.join(r for r in sorted(_ACCEPTED) if r not in ('input', 'output'))} "
                         f"(USD per million tokens); got keys {sorted(value)}")
    if "cache_read" in value and "cached_input" in value:
        raise InputError(f"{where}.{key}: give cache_read or cached_input (the same rate), not both")
    rates = {ALIASES.get(k, k): _number(v, f"{where}.{key}.{k}") for k, v in value.items()}
    return Price(key=key, source=source, **rates)


def _shipped_data() -> dict:
    text = resources.files("kernel_forge").joinpath("data/pricing.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def shipped_prices() -> dict[str, Price]:
    """The shipped table, keyed ``provider:model`` (lower case)."""
    return {k.lower(): _price_from(k.lower(), v, "shipped", "pricing.json")
            for k, v in _shipped_data().items() if not k.startswith("_")}


@lru_cache(maxsize=1)
def multipliers() -> dict[str, dict[str, float]]:
    """Per provider, the published multipliers of the input rate for rates an entry leaves out."""
    raw = _shipped_data().get("_multipliers", {})
    return {p: {ALIASES.get(k, k): float(v) for k, v in m.items() if not k.startswith("_")}
            for p, m in raw.items() if isinstance(m, Mapping)}


def shipped_source() -> str:
    """The table's ``_source`` note (where the figures come from, and that they must be checked)."""
    return _shipped_data().get("_source", "")


def shipped_checked() -> str:
    """The date (YYYY-MM-DD) the shipped figures were last checked against the providers' pages."""
    return _shipped_data().get("_checked", "")


class PriceTable:
    """The shipped prices with ``overrides`` laid over them (an override wins on the same key)."""

    def __init__(self, overrides: Mapping[str, object] | None = None, *, shipped: bool = True,
                 where: str = "prices"):
        self.entries: dict[str, Price] = dict(shipped_prices()) if shipped else {}
        for k, v in (overrides or {}).items():
            if str(k).startswith("_"):
                continue
            key = str(k).strip().lower()
            self.entries[key] = _price_from(key, v, "override", where)

    def lookup(self, provider: str, model: str) -> Price | None:
        """The price for ``provider:model``: an exact key, else the longest key the model id
        extends by a date suffix or ``-latest``; ``None`` if none."""
        want = f"{provider.strip().lower()}:{model.strip().lower()}"
        exact = self.entries.get(want)
        if exact is not None:
            return exact
        best: Price | None = None
        for key, price in self.entries.items():
            if want.startswith(key) and _SUFFIX.match(want[len(key):]):
                if best is None or len(key) > len(best.key):
                    best = price
        return best

    def cost(self, provider: str, model: str, input_tokens: int, output_tokens: int, *,
             cache_read_tokens: int = 0, cache_write_tokens: int = 0, cache_write_1h_tokens: int = 0) -> Cost:
        """``input_tokens`` are the uncached input tokens, billed at the plain input rate; cache
        reads and writes are billed at their own rates (``cache_write_tokens`` at the 5-minute
        write rate, ``cache_write_1h_tokens`` at the 1-hour one)."""
        price = self.lookup(provider, model)
        if price is None:
            return Cost(usd=0.0, priced=False)
        usd = (input_tokens * price.input + output_tokens * price.output
               + cache_read_tokens * price.rate("cache_read")
               + cache_write_tokens * price.rate("cache_write")
               + cache_write_1h_tokens * price.rate("cache_write_1h")) / PER
        return Cost(usd=round(usd, 10), priced=True, key=price.key)


def price_table(prices: PriceTable | Mapping[str, object] | None = None) -> PriceTable:
    """Accept what a proposer was given (``None``, an override mapping or a table)."""
    if isinstance(prices, PriceTable):
        return prices
    return PriceTable(prices)


def lookup(spec: str, overrides: Mapping[str, object] | None = None) -> Price | None:
    """``lookup("anthropic:claude-sonnet-4-5-20250929")`` -> the ``claude-sonnet-4-5`` price."""
    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise InputError(f"price lookups take 'provider:model', got {spec!r}")
    return PriceTable(overrides).lookup(provider, model)


def cost(provider: str, model: str, input_tokens: int, output_tokens: int,
         overrides: Mapping[str, object] | None = None, **cache_tokens: int) -> Cost:
    return PriceTable(overrides).cost(provider, model, input_tokens, output_tokens, **cache_tokens)
