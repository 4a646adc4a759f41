"""What a model call cost, from a shipped price table that a user config may override.

The table (``kernel_forge/data/pricing.json``) holds list prices in USD per million input and
output tokens, keyed ``"provider:model"``.  A dated model id (``claude-sonnet-4-5-20250929``,
``gpt-4o-2024-08-06``) or a ``-latest`` alias is priced by the key it extends; the longest key
wins (``gpt-5-mini-2025-08-07`` is ``gpt-5-mini``, not ``gpt-5``).  A model the table does not
know costs 0 with ``priced=False``, so evidence can say "cost unknown" instead of "free".

The figures are transcribed list prices and go stale; the file's ``_source`` says so.  Override
or extend them with a mapping ``{"provider:model": {"input": X, "output": Y}}`` (or ``[X, Y]``).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..errors import InputError

_SUFFIX = re.compile(r"^-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")
PER = 1_000_000


@dataclass(frozen=True)
class Price:
    """USD per million tokens for one ``provider:model`` key."""

    key: str
    input: float
    output: float
    source: str = "shipped"          # "shipped" | "override"


@dataclass(frozen=True)
class Cost:
    usd: float
    priced: bool                     # False: the model is not in the table; usd is 0
    key: str | None = None           # the table key that priced it


def _price_from(key: str, value: object, source: str, where: str) -> Price:
    if isinstance(value, Mapping):
        if set(value) - {"input", "output"} or not {"input", "output"} <= set(value):
            raise InputError(f"{where}.{key}: a price needs exactly 'input' and 'output' "
                             f"(USD per million tokens), got keys {sorted(value)}")
        inp, out = value["input"], value["output"]
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        inp, out = value
    else:
        raise InputError(f"{where}.{key}: a price is {{\"input\": X, \"output\": Y}} or [X, Y] "
                         f"(USD per million tokens), got {value!r}")
    for name, v in (("input", inp), ("output", out)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise InputError(f"{where}.{key}: {name} price must be a non-negative number, got {v!r}")
    if ":" not in key:
        raise InputError(f"{where}.{key}: price keys are 'provider:model', e.g. 'openai:gpt-5'")
    return Price(key=key, input=float(inp), output=float(out), source=source)


@lru_cache(maxsize=1)
def shipped_prices() -> dict[str, Price]:
    """The shipped table, keyed ``provider:model`` (lower case)."""
    text = resources.files("kernel_forge").joinpath("data/pricing.json").read_text(encoding="utf-8")
    data = json.loads(text)
    return {k.lower(): _price_from(k.lower(), v, "shipped", "pricing.json")
            for k, v in data.items() if not k.startswith("_")}


def shipped_source() -> str:
    """The table's ``_source`` note (where the figures come from, and that they must be checked)."""
    text = resources.files("kernel_forge").joinpath("data/pricing.json").read_text(encoding="utf-8")
    return json.loads(text).get("_source", "")


class PriceTable:
    """The shipped prices with ``overrides`` laid over them (an override wins on the same key)."""

    def __init__(self, overrides: Mapping[str, object] | None = None, *, shipped: bool = True):
        self.entries: dict[str, Price] = dict(shipped_prices()) if shipped else {}
        for k, v in (overrides or {}).items():
            if str(k).startswith("_"):
                continue
            key = str(k).strip().lower()
            self.entries[key] = _price_from(key, v, "override", "prices")

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

    def cost(self, provider: str, model: str, input_tokens: int, output_tokens: int) -> Cost:
        price = self.lookup(provider, model)
        if price is None:
            return Cost(usd=0.0, priced=False)
        usd = (input_tokens * price.input + output_tokens * price.output) / PER
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
         overrides: Mapping[str, object] | None = None) -> Cost:
    return PriceTable(overrides).cost(provider, model, input_tokens, output_tokens)
