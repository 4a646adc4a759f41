"""The one validator: values checked and converted, layered over a base, and each refusal names
its place as the entry point spells it."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.config.build import AsArguments, InFile, OnCommandLine, build, check_settings, check_values
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig


def refusal(cls, values, where) -> str:
    with pytest.raises(InputError) as err:
        build(cls, values, where)
    assert err.value.exit_code == 2
    return str(err.value)


def test_each_entry_point_names_the_place_its_own_way_and_says_the_same_after_it():
    cli = OnCommandLine({("gate", "reps"): "--reps"})
    mcp = AsArguments({("gate", "reps"): "reps"}, InFile("settings"))
    assert refusal(GateOptions, {"reps": 0}, cli) == "--reps 0: must be at least 1, got 0"
    assert refusal(GateOptions, {"reps": 0}, InFile("opt.json")) == "opt.json: $.gate.reps: must be at least 1, got 0"
    assert refusal(GateOptions, {"reps": 0}, mcp) == "reps: must be at least 1, got 0"
    assert refusal(GateOptions, {"min_reps": 0}, mcp) == "settings: $.gate.min_reps: must be at least 1, got 0"


def test_an_item_of_a_list_is_named_by_its_index_in_a_file_and_by_its_value_on_a_command_line():
    models = ["openai:gpt-5", "gpt-5"]
    assert refusal(ProposerConfig, {"models": models}, InFile("f.json")) == \
        "f.json: $.proposer.models[1]: must be anthropic:MODEL or openai:MODEL, got 'gpt-5'"
    assert refusal(ProposerConfig, {"models": models}, OnCommandLine({("proposer", "models"): "--model"})) == \
        "--model 'gpt-5': must be anthropic:MODEL or openai:MODEL, got 'gpt-5'"


@pytest.mark.parametrize("values, words", [
    ({"max_iterations": "many"}, "expected an integer, got 'many'"),
    ({"max_iterations": True}, "expected an integer, got True"),
    ({"candidates": 2.5}, "expected an integer, got 2.5"),
    ({"roof_stop": "high"}, "expected a number, got 'high'"),
    ({"roof_stop": float("nan")}, "must be a finite number, got nan"),
    ({"refine": 1}, "expected true or false, got 1"),
    ({"search": "random"}, "must be one of 'greedy', 'population', 'anneal', 'brute', got 'random'"),
    ({"candidates": None}, "a value is required (null is not allowed here)"),
    ({"hints": 3}, "expected a string, got 3"),
])
def test_a_value_of_the_wrong_type_says_what_was_expected(values, words):
    assert refusal(LoopConfig, values, InFile("f")).endswith(words)


def test_values_are_converted_and_laid_over_the_base():
    base = build(LoopConfig, {"patience": 3, "roof_stop": 1}, InFile("f"))
    assert isinstance(base.roof_stop, float) and base.roof_stop == 1.0
    over = build(LoopConfig, {"max_iterations": 2}, InFile("g"), base=base)
    assert (over.max_iterations, over.patience, base.max_iterations) == (2, 3, None)
    assert check_values(GateOptions, {"fresh_seeds": (4, 5)}, InFile("f")) == {"fresh_seeds": [4, 5]}


def test_a_settings_object_made_elsewhere_is_checked_field_by_field():
    check_settings(GateOptions(), InFile("f"))
    bad = GateOptions(timing_budget_s=0.0)
    with pytest.raises(InputError, match=r"--timing-budget 0.0: must be > 0, got 0.0"):
        check_settings(bad, OnCommandLine({("gate", "timing_budget_s"): "--timing-budget"}))
