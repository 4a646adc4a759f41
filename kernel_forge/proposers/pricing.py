"""What a model call cost, from the prices in the capability table (``kernel_forge/data/models.json``)
that a user config may override.

Prices are USD per million tokens, keyed ``"provider:model"``: ``input`` and ``output``, and the
prompt-cache rates the providers bill separately -- ``cache_read`` (Anthropic cache hits; OpenAI's
"cached input", also accepted as ``cached_input``), ``cache_write`` (the short lifetime: Anthropic
5-minute writes, OpenAI 30-minute writes, which GPT-5.6 and later bill at 1.25x input) and
``cache_write_long`` (Anthropic 1-hour writes, OpenAI 12-hour writes; ``cache_write_1h`` is its
older name).  A rate an entry leaves out comes from the provider's multiplier of ``input`` (the
table's ``_multipliers``), chosen so that a cost is never under-counted.  ``long_context`` (e.g.
OpenAI above 272K input tokens, Claude Haiku 5.5 above 100K) multiplies every rate of a request
whose input exceeds the threshold.

A dated model id (``claude-haiku-4-5-20251001``, ``gpt-4.1-2025-04-14``) or a ``-latest`` alias is
priced by the key it extends; the longest key wins.  A model the table does not know costs 0 with
``priced=False``, so evidence can say "cost unknown" instead of "free" (and ``--budget-usd``
refuses to start with it).  The figures go stale: the table's ``_checked`` and each entry's
``source`` say where and when they were read.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from kernel_forge.common.errors import InputError

PER = 1_000_000
RATES = ("input", "output", "cache_read", "cache_write", "cache_write_long")
ALIASES = {"cached_input": "cache_read", "cache_write_1h": "cache_write_long"}   # OpenAI's name; the old name
_ACCEPTED = set(RATES) | set(ALIASES)


@dataclass(frozen=True)
class Price:
    """USD per million tokens for one ``provider:model`` key."""

    key: str
    input: float
    output: float
    cache_read: float | None = None       # None: the provider's multiplier of input (see rate())
    cache_write: float | None = None
    cache_write_long: float | None = None
    source: str = "shipped"               # "shipped" | "override"
    long_context: dict | None = None      # {"above_input_tokens": N, "input": x, "cache": x, "output": x}

    @property
    def cache_write_1h(self) -> float | None:          # the older name
        return self.cache_write_long

    def rate(self, name: str) -> float:
        """The USD-per-million rate of ``name``, a multiplier of ``input`` where none is given."""
        name = ALIASES.get(name, name)
        value = getattr(self, name)
        if value is not None:
            return value
        provider = self.key.partition(":")[0]
        return self.input * multipliers().get(provider, {}).get(name, 1.0)

    def factors(self, total_input: int) -> tuple[float, float, float]:
        """(input, cache, output) multipliers for a request of ``total_input`` input tokens."""
        lc = self.long_context
        if lc and total_input > int(lc.get("above_input_tokens", 0)):
            return float(lc.get("input", 1.0)), float(lc.get("cache", 1.0)), float(lc.get("output", 1.0))
        return 1.0, 1.0, 1.0

    def highest_input_rate(self) -> float:
        """The dearest rate an input token can be billed at (a cache write, often)."""
        return max(self.input, self.rate("cache_write"), self.rate("cache_write_long"))


@dataclass(frozen=True)
class Cost:
    usd: float
    priced: bool                     # False: the model is not in the table; usd is 0
    key: str | None = None           # the table key that priced it


def _number(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not math.isfinite(v):
        raise InputError(f"{where}: a price must be a non-negative number (USD per million tokens), got {v!r}")
    return float(v)


def _price_from(key: str, value: object, source: str, where: str, long_context: dict | None = None) -> Price:
    if ":" not in key:
        raise InputError(f"{where}.{key}: price keys are 'provider:model', e.g. 'openai:gpt-6.2-sol'")
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
    for name, alias in (("cache_read", "cached_input"), ("cache_write_long", "cache_write_1h")):
        if name in value and alias in value:
            raise InputError(f"{where}.{key}: give {name} or {alias} (the same rate), not both")
    rates = {ALIASES.get(k, k): _number(v, f"{where}.{key}.{k}") for k, v in value.items()}
    return Price(key=key, source=source, long_context=long_context, **rates)


def _shipped_data() -> dict:
    text = resources.files("kernel_forge").joinpath("data/models.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def shipped_prices() -> dict[str, Price]:
    """The shipped prices, keyed ``provider:model`` (lower case)."""
    out = {}
    for k, v in _shipped_data()["models"].items():
        if "prices" in v:
            out[k.lower()] = _price_from(k.lower(), v["prices"], "shipped", "models.json",
                                         long_context=v.get("long_context"))
    return out


@lru_cache(maxsize=1)
def multipliers() -> dict[str, dict[str, float]]:
    """Per provider, the multipliers of the input rate for rates an entry leaves out."""
    raw = _shipped_data().get("_multipliers", {})
    return {p: {ALIASES.get(k, k): float(v) for k, v in m.items() if not k.startswith("_")}
            for p, m in raw.items() if isinstance(m, Mapping)}


def shipped_source() -> str:
    """Where the shipped figures come from (the table's notes; each entry has its own ``source``)."""
    data = _shipped_data()
    return data.get("_about", "") + " Sources: " + "; ".join(f"{k}: {v}" for k, v in data.get("_sources", {}).items())


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
        from kernel_forge.proposers.capabilities import lookup_key

        key = lookup_key(provider, model, self.entries)
        return self.entries[key] if key is not None else None

    def cost(self, provider: str, model: str, input_tokens: int, output_tokens: int, *,
             cache_read_tokens: int = 0, cache_write_tokens: int = 0, cache_write_long_tokens: int = 0,
             cache_write_1h_tokens: int = 0) -> Cost:
        """``input_tokens`` are the uncached input tokens, billed at the plain input rate; cache
        reads and writes are billed at their own rates (``cache_write_tokens`` at the short-TTL
        write rate, ``cache_write_long_tokens`` at the long one); a request whose whole input is
        above the model's long-context threshold is billed at its long-context multiples."""
        price = self.lookup(provider, model)
        if price is None:
            return Cost(usd=0.0, priced=False)
        long_writes = cache_write_long_tokens + cache_write_1h_tokens
        total_input = input_tokens + cache_read_tokens + cache_write_tokens + long_writes
        fi, fc, fo = price.factors(total_input)
        usd = (input_tokens * price.input * fi + output_tokens * price.output * fo
               + fc * (cache_read_tokens * price.rate("cache_read")
                       + cache_write_tokens * price.rate("cache_write")
                       + long_writes * price.rate("cache_write_long"))) / PER
        return Cost(usd=round(usd, 10), priced=True, key=price.key)

    def worst_case(self, provider: str, model: str, input_tokens: int, output_tokens: int) -> Cost:
        """The most a call with ``input_tokens`` in and at most ``output_tokens`` out can cost:
        every input token at the dearest input rate (a long-TTL cache write, where that is dearer),
        at the long-context multiples where the input is above the threshold."""
        price = self.lookup(provider, model)
        if price is None:
            return Cost(usd=0.0, priced=False)
        fi, fc, fo = price.factors(input_tokens)
        per_input = max(price.input * fi, max(price.rate("cache_write"), price.rate("cache_write_long")) * fc)
        usd = (input_tokens * per_input + output_tokens * price.output * fo) / PER
        return Cost(usd=round(usd, 10), priced=True, key=price.key)


def price_table(prices: PriceTable | Mapping[str, object] | None = None) -> PriceTable:
    """Accept what a proposer was given (``None``, an override mapping or a table)."""
    if isinstance(prices, PriceTable):
        return prices
    return PriceTable(prices)


def lookup(spec: str, overrides: Mapping[str, object] | None = None) -> Price | None:
    """``lookup("anthropic:claude-haiku-4-5-20251001")`` -> the ``claude-haiku-4-5`` price."""
    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise InputError(f"price lookups take 'provider:model', got {spec!r}")
    return PriceTable(overrides).lookup(provider, model)


def cost(provider: str, model: str, input_tokens: int, output_tokens: int,
         overrides: Mapping[str, object] | None = None, **cache_tokens: int) -> Cost:
    return PriceTable(overrides).cost(provider, model, input_tokens, output_tokens, **cache_tokens)
