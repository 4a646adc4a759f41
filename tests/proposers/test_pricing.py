"""kernel_forge.proposers.pricing: the price table, overrides, cache rates, where each figure comes from."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.proposers import pricing


def test_pricing_prefix_match_on_dated_ids():
    t = pricing.PriceTable()
    assert t.lookup("anthropic", "claude-haiku-4-5-20251001").key == "anthropic:claude-haiku-4-5"
    assert t.lookup("anthropic", "claude-opus-4-5-20251101").key == "anthropic:claude-opus-4-5"
    assert t.lookup("openai", "gpt-5-mini-2025-08-07").key == "openai:gpt-5-mini"      # longest key wins
    assert t.lookup("openai", "gpt-5-2025-08-07").key == "openai:gpt-5"
    assert t.lookup("anthropic", "claude-sonnet-5-5-latest").key == "anthropic:claude-sonnet-5-5"
    assert t.lookup("openai", "GPT-6.2-SOL").key == "openai:gpt-6.2-sol"
    # only date / -latest suffixes extend a key
    assert t.lookup("openai", "gpt-5-turbo-max") is None
    assert t.lookup("anthropic", "claude-opus-9-9") is None
    assert t.lookup("openai", "claude-sonnet-5-5") is None                               # provider matters
    assert pricing.lookup("openai:gpt-6-luna").input == 0.1
    c = t.cost("anthropic", "claude-opus-5-5", 1_000_000, 100_000)
    assert c.priced and c.usd == pytest.approx(4.0 + 2.0) and c.key == "anthropic:claude-opus-5-5"


def test_pricing_unknown_model_and_overrides():
    unknown = pricing.cost("openai", "llama-3.1-70b", 5000, 5000)
    assert unknown == pricing.Cost(usd=0.0, priced=False)
    over = {"openai:gpt-6-sol": {"input": 2.0, "output": 20.0}, "openai:llama-3.1-70b": [0.5, 0.5], "_note": "ignored"}
    t = pricing.PriceTable(over)
    assert t.cost("openai", "gpt-6-sol-2026-09-22", 1_000_000, 1_000_000).usd == pytest.approx(22.0)
    assert t.lookup("openai", "gpt-6-sol").source == "override"
    assert t.cost("openai", "llama-3.1-70b", 2_000_000, 0).usd == pytest.approx(1.0)
    assert t.lookup("anthropic", "claude-opus-5-5").source == "shipped"
    assert pricing.price_table(t) is t
    for bad in ({"openai:x": {"input": 1}}, {"openai:x": [1, -2]}, {"gpt-5": [1, 2]}, {"openai:x": "cheap"},
                {"openai:x": {"input": 1, "output": 2, "cache_write_1h": 1, "cache_write_long": 1}}):
        with pytest.raises(InputError):
            pricing.PriceTable(bad)


def test_every_table_entry_says_where_its_figures_come_from():
    from kernel_forge.proposers import capabilities

    src = pricing.shipped_source()
    assert "platform.claude.com" in src and "developers.openai.com" in src
    named = capabilities.sources()
    for key, caps in capabilities.entries().items():
        assert caps.source, key
        # a source is a named source of the table's _sources, a URL or page, or says it was not found
        text = " ".join(caps.source.values())
        assert any(n in text for n in named) or "." in text or "not found" in text, key
        for field in caps.unverified:
            assert field.split(".")[0] in {"prices", "effort", "default_effort", "limits", "min_cache_tokens",
                                           "forced_tool_choice", "thinking_off"}, (key, field)
    for key, price in pricing.shipped_prices().items():
        assert 0 < price.input < price.output, key


def test_cache_rates_default_to_published_multipliers():
    t = pricing.PriceTable({"anthropic:my-claude": {"input": 2.0, "output": 8.0},
                            "openai:my-gpt": {"input": 1.0, "cached_input": 0.1, "output": 4.0},
                            "openai:plain": [1.0, 2.0]})
    m = 1_000_000
    c = t.cost("anthropic", "my-claude", m, m, cache_read_tokens=m, cache_write_tokens=m, cache_write_1h_tokens=m)
    assert c.usd == pytest.approx(2.0 + 8.0 + 0.2 + 2.5 + 4.0)
    assert t.cost("openai", "my-gpt", 0, 0, cache_read_tokens=m).usd == pytest.approx(0.1)
    # OpenAI publishes no multiplier: an unknown cached rate is the plain input rate (never below the invoice)
    assert t.cost("openai", "plain", 0, 0, cache_read_tokens=m).usd == pytest.approx(1.0)
    assert t.lookup("openai", "my-gpt").cache_read == 0.1
    with pytest.raises(InputError, match="not both"):
        pricing.PriceTable({"openai:x": {"input": 1, "output": 2, "cache_read": 0.1, "cached_input": 0.1}})
    with pytest.raises(InputError, match="cache_write"):
        pricing.PriceTable({"openai:x": {"input": 1, "output": 2, "cache_writes": 0.1}})


def test_pricing_table_is_dated_and_holds_current_models():
    from kernel_forge.proposers import capabilities

    assert pricing.shipped_checked() == capabilities.checked() == "2026-12-02"
    table = pricing.shipped_prices()
    for key in ("anthropic:claude-fable-5-2", "anthropic:claude-opus-5-5", "anthropic:claude-sonnet-5-5",
                "anthropic:claude-haiku-5-5", "anthropic:claude-haiku-4-5", "openai:gpt-6.2-astra", "openai:gpt-6.2-sol",
                "openai:gpt-6.1-terra", "openai:gpt-6-luna", "openai:gpt-5.6-terra"):
        price = table[key]
        assert 0 < price.rate("cache_read") < price.input < price.output, key
        assert price.input < price.rate("cache_write") < price.rate("cache_write_long"), key
    # GPT-5.6 and later bill cache writes at 1.25x input; earlier models do not bill them
    assert table["openai:gpt-6.2-sol"].rate("cache_write") == pytest.approx(1.25 * 2.0)
    assert table["openai:gpt-5.5"].rate("cache_write") == 0.0
    # Haiku 5.5 above 100K prompt tokens and OpenAI above 272K bill the whole request at long-context rates
    assert pricing.cost("anthropic", "claude-haiku-5-5", 100_001, 0).usd == pytest.approx(100_001 * 0.5 / 1e6)
    assert pricing.cost("openai", "gpt-6.2-sol", 272_001, 1000).usd == pytest.approx((272_001 * 4.0 + 1000 * 15.0) / 1e6)
