"""Tests of kernel_forge/config/describe.py: the settings of kforge init --describe."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.config.build import InFile, OnCommandLine, build, check_values
from kernel_forge.config.describe import DescribeConfig


def test_by_default_one_repair_four_extra_shapes_no_initial_kernel_and_no_model():
    d = DescribeConfig()
    assert (d.model, d.replay, d.repairs, d.extra_shapes, d.initial) == (None, None, 1, 4, False)
    assert (d.request_timeout_s, d.budget_usd, d.max_tokens) == (300.0, None, None)
    assert DescribeConfig.SECTION == "describe"


@pytest.mark.parametrize("values, words", [
    ({"model": "gpt-5"}, "$.describe.model: must be anthropic:MODEL or openai:MODEL, got 'gpt-5'"),
    ({"budget_usd": 0}, "$.describe.budget_usd: must be > 0, got 0.0"),
    ({"temperature": 2.5}, "$.describe.temperature: must be at most 2, got 2.5"),
    ({"repairs": 101}, "$.describe.repairs: must be at most 100, got 101"),
    ({"extra_shapes": -1}, "$.describe.extra_shapes: must be at least 0, got -1"),
    ({"reasoning_effort": "extreme"}, "$.describe.reasoning_effort: must be one of 'none', 'minimal', 'low', "
                                      "'medium', 'high', 'xhigh', 'max', got 'extreme'"),
])
def test_each_setting_is_refused_outside_its_declared_bounds(values, words):
    with pytest.raises(InputError) as info:
        check_values(DescribeConfig, values, InFile("init.json"))
    assert str(info.value) == f"init.json: {words}"


def test_the_options_init_spells_name_the_setting_and_a_good_value_is_taken():
    where = OnCommandLine({("describe", "max_tokens"): "--max-output-tokens", ("describe", "model"): "--model"})
    with pytest.raises(InputError) as info:
        check_values(DescribeConfig, {"max_tokens": 0}, where)
    assert str(info.value) == "--max-output-tokens 0: must be at least 1, got 0"
    d = build(DescribeConfig, {"model": "anthropic:claude-sonnet-4-5", "budget_usd": 2, "repairs": 0}, where)
    assert (d.model, d.budget_usd, d.repairs) == ("anthropic:claude-sonnet-4-5", 2.0, 0)
