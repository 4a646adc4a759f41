"""Tests of kernel_forge/config/loop_settings.py: the loop's stop rules and search settings."""
from __future__ import annotations

import json

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.config.build import InFile, check_values
from kernel_forge.config.loop_settings import DEFAULT_BUDGET_USD, LoopConfig


def test_the_budget_is_twenty_dollars_by_default_and_zero_or_none_is_no_limit():
    assert LoopConfig().budget_usd == DEFAULT_BUDGET_USD == 20.0 and LoopConfig().budget_limit == 20.0
    assert LoopConfig(budget_usd=2.5).budget_limit == 2.5
    assert LoopConfig(budget_usd=0).budget_limit is None and LoopConfig(budget_usd=None).budget_limit is None


def test_a_loop_config_goes_through_json_and_back():
    conf = LoopConfig(max_iterations=3, hints="use float4", search="greedy", time_limit_s=60.0)
    data = json.loads(json.dumps(conf.to_json()))
    assert data["max_iterations"] == 3 and data["search"] == "greedy" and data["patience"] is None
    assert LoopConfig(**data) == conf
    assert "SECTION" not in data and LoopConfig.SECTION == "loop"


@pytest.mark.parametrize("values, words", [
    ({"min_improvement": 1.0}, "$.loop.min_improvement: must be < 1, got 1.0"),
    ({"min_improvement": -0.1}, "$.loop.min_improvement: must be at least 0, got -0.1"),
    ({"roof_stop": 2.5}, "$.loop.roof_stop: must be at most 2, got 2.5"),
    ({"time_limit_s": 0}, "$.loop.time_limit_s: must be > 0, got 0.0"),
    ({"search": "random"}, "$.loop.search: must be one of 'greedy', 'population', 'anneal', 'brute', got 'random'"),
    ({"candidates": 0}, "$.loop.candidates: must be at least 1, got 0"),
])
def test_each_setting_is_refused_outside_its_declared_bounds(values, words):
    with pytest.raises(InputError) as info:
        check_values(LoopConfig, values, InFile("opt.json"))
    assert str(info.value) == f"opt.json: {words}"
