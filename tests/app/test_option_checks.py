"""The bounds of every setting are written twice (``option_checks.RULES`` and ``schemas/run.schema.json``,
which the generated options check first): they must accept and refuse the same values, so a
value is never refused by one and then by the other with different words (``--budget-usd -1``
said "must be >= 0", and then 0 said "must be above 0")."""
from __future__ import annotations

import math
import typing

import pytest

from kernel_forge.app import cli_options
from kernel_forge.app import option_checks
from kernel_forge.common.errors import InputError
from kernel_forge.gate.gate import GateOptions
from kernel_forge.search.loop import LoopConfig
from kernel_forge.app.run_setup import ProposerConfig

SECTIONS = {"loop": LoopConfig, "gate": GateOptions, "proposer": ProposerConfig}
NUMBERS = [-1, -0.5, 0, 0.25, 0.5, 0.999, 1, 1.5, 2, 2.5, 7, 1024, 10**6]
TEXTS = ["", "sm_90", "sm90", "sm_90a", "gpu", "cpu", "tpu", "0,1", "all", "zero,one", "0,0", "round-robin",
         "parallel", "1, 2"]


def _accepts(fn) -> bool:
    try:
        fn()
        return True
    except InputError:
        return False


def _rows():
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        bounds = cli_options._schema_bounds(section)
        for name in option_checks.RULES:
            if name in hints and name in bounds:
                yield pytest.param(section, name, hints[name], bounds[name], id=f"{section}.{name}")


@pytest.mark.parametrize("section, name, hint, bounds", list(_rows()))
def test_the_schema_and_the_rules_accept_the_same_values(section, name, hint, bounds):
    inner, _ = cli_options._strip_optional(hint)
    values = TEXTS if inner is str else [v for v in NUMBERS if inner is float or isinstance(v, int)]
    for v in values:
        if name == "devices" and v == "0,0":
            continue    # a GPU named twice: no schema pattern says "each once"; RULES refuse it, before the probe
        by_schema = _accepts(lambda: cli_options.check_value(v, hint, f"--{name}", bounds))
        by_rules = _accepts(lambda: option_checks.check_value(name, v, hint, where=f"--{name}"))
        assert by_schema == by_rules, f"{section}.{name} = {v!r}: schema {'accepts' if by_schema else 'refuses'}, " \
                                      f"RULES {'accept' if by_rules else 'refuse'}"


def test_every_rule_has_its_bound_in_the_schema():
    covered = {name for section, cls in SECTIONS.items() for name in cli_options._schema_bounds(section)}
    assert set(option_checks.RULES) <= covered


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_setting_is_refused_by_both(value):
    with pytest.raises(InputError, match="finite"):
        cli_options.check_value(value, float, "--target-speedup", {"exclusiveMinimum": 0})
    with pytest.raises(InputError, match="finite"):
        option_checks.check_value("target_speedup", value, float, where="--target-speedup")
