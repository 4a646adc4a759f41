"""The bounds of every setting are declared once (``kernel_forge/config``) and checked by one
validator: these tests hold the declaration to what a user expects (the seven settings whose
bounds once disagreed between the option checks and the run schema), make sure nothing numeric
is left unbounded, and check the words of a refusal."""
from __future__ import annotations

import math

import pytest

from kernel_forge.app import option_checks
from kernel_forge.common.errors import InputError
from kernel_forge.config.build import InFile, OnCommandLine, build, check_values
from kernel_forge.config.describe import DescribeConfig
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.common.setting import bound_words, fields_of, strip_optional

SECTIONS = {"loop": LoopConfig, "gate": GateOptions, "proposer": ProposerConfig, "describe": DescribeConfig}


def _accepts(cls, name, value) -> bool:
    try:
        check_values(cls, {name: value}, InFile("t"))
        return True
    except InputError:
        return False


# the seven that disagreed, as settled: (section, field, accepted, refused)
SETTLED = [
    ("loop", "max_iterations", [1, 7, None], [0, -1]),               # None: its default (7, or none for the tuner)
    ("loop", "budget_usd", [0, 0.01, 5, None], [-1, -0.01]),          # 0: no limit (the default is $20)
    ("loop", "time_limit_s", [0.5, 3600, None], [0, -1]),
    ("loop", "max_tokens", [1, 10**6, None], [0, -5]),
    ("gate", "plausible_margin", [1, 1.25, 3], [0.99, 0, -1]),          # below 1 an honest kernel at the roof is implausible
    ("proposer", "temperature", [0, 1, 2, None], [-0.1, 2.01, 3]),
    ("loop", "min_improvement", [0, 0.01, 0.99], [1, 1.5, -0.01]),     # a relative gain is below 1
]


@pytest.mark.parametrize("section, name, good, bad", SETTLED, ids=[f"{s}.{n}" for s, n, _, _ in SETTLED])
def test_the_seven_settings_that_disagreed_have_one_bound(section, name, good, bad):
    cls = SECTIONS[section]
    assert [v for v in good if not _accepts(cls, name, v)] == []
    assert [v for v in bad if _accepts(cls, name, v)] == []


@pytest.mark.parametrize("section", SECTIONS)
def test_every_number_has_a_declared_lower_bound(section):
    for f in fields_of(SECTIONS[section]):
        inner, _ = strip_optional(f.annotation)
        item = getattr(inner, "__args__", (inner,))[0] if inner not in (int, float) else inner
        if item in (int, float):
            assert f.spec.min is not None or f.spec.above is not None, f"{section}.{f.name} has no lower bound"


@pytest.mark.parametrize("section", SECTIONS)
def test_every_default_passes_its_own_bounds(section):
    cls = SECTIONS[section]
    defaults = {f.name: f.default for f in fields_of(cls)}
    assert check_values(cls, defaults, InFile("defaults")) == defaults


@pytest.mark.parametrize("section", SECTIONS)
def test_every_setting_has_help(section):
    missing = [f.name for f in fields_of(SECTIONS[section]) if len(f.spec.help) < 8]
    assert missing == []


def test_the_bound_words_name_each_kind_of_bound():
    from kernel_forge.common.setting import Spec

    assert bound_words(Spec(min=1)) == "at least 1"
    assert bound_words(Spec(above=0)) == "> 0"
    assert bound_words(Spec(min=0, max=1)) == "in [0, 1]"
    assert bound_words(Spec(min=0, below=1)) == "in [0, 1)"
    assert bound_words(Spec(above=0, max=2)) == "in (0, 2]"
    assert bound_words(Spec(max=5)) == "at most 5" and bound_words(Spec()) is None


def test_a_refusal_names_the_place_as_its_entry_point_spells_it_and_says_the_same_after_it():
    cli = OnCommandLine({("loop", "max_iterations"): "--max-iterations"})
    said = []
    for where in (cli, InFile("opt.json")):
        with pytest.raises(InputError) as err:
            build(LoopConfig, {"max_iterations": -1}, where)
        said.append(str(err.value))
    assert said == ["--max-iterations -1: must be at least 1, got -1",
                    "opt.json: $.loop.max_iterations: must be at least 1, got -1"]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_setting_is_refused(value):
    with pytest.raises(InputError, match="--target-speedup .*: must be a finite number"):
        option_checks.check_settings(LoopConfig(target_speedup=value))


def test_devices_are_ordinals_each_once_or_all():
    for good in ("", "0", "0,1", " 1 , 2 ", "all"):
        assert _accepts(GateOptions, "devices", good), good
    for bad in ("0,0", "zero,one", "1;2", "-1"):
        assert not _accepts(GateOptions, "devices", bad), bad
    with pytest.raises(InputError, match="GPU ordinals like 0,1 \\(each once\\) or all"):
        option_checks.check_settings(GateOptions(devices="0,0"))


def test_an_unknown_setting_is_refused_naming_the_known_ones():
    with pytest.raises(InputError) as err:
        build(GateOptions, {"wramup": 3}, InFile("opt.json"))
    assert str(err.value).startswith("opt.json: $.gate.wramup: unknown setting") and "warmup" in err.value.hint
