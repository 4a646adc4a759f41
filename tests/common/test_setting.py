"""A setting is declared once: its default is the field's, its bounds and help and command-line
name are its Spec, and its option name follows from them."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from kernel_forge.config.gate_settings import GateOptions, TimingOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.sections import RUN_SECTIONS
from kernel_forge.common.setting import Spec, fields_of, option_names, setting, strip_optional


def test_a_setting_keeps_its_default_and_its_spec():
    @dataclass
    class Section:
        SECTION: ClassVar[str] = "s"
        count: int = setting(3, min=1, help="how many")
        names: list[str] = setting(factory=list, pattern="^a", must="starting with a", help="the names")

    (count, names) = fields_of(Section)
    assert (count.default, count.annotation, count.spec) == (3, int, Spec(help="how many", min=1))
    assert names.default == [] and Section().names is not Section().names     # a fresh list each time
    assert names.spec.pattern == "^a" and names.spec.must == "starting with a"


def test_strip_optional_says_whether_none_is_allowed():
    assert strip_optional(int | None) == (int, True) and strip_optional(float) == (float, False)


def test_the_run_sections_keep_their_option_names():
    names = option_names(RUN_SECTIONS)
    assert names[("loop", "max_iterations")] == "--max-iterations" and names[("loop", "time_limit_s")] == "--time-limit"
    assert names[("loop", "seed")] == "--loop-seed" and names[("gate", "seed")] == "--seed"
    assert names[("gate", "launch_timeout_s")] == "--timeout" and names[("gate", "device")] == "--cuda-device"
    assert names[("proposer", "max_tokens")] == "--max-output-tokens" and names[("loop", "max_tokens")] == "--max-tokens"
    assert names[("gate", "timing_timeout_s")] == "--timing-timeout"           # seconds: no unit in the name
    assert ("proposer", "prices") not in names                                  # a mapping: config file only
    assert len(set(names.values())) == len(names)


def test_a_clash_gets_the_section_in_its_name_and_a_reserved_name_is_never_taken():
    @dataclass
    class Other:
        warmup: int = setting(1, min=0, help="another warm-up")
        quick: bool = setting(False, help="a quick flag")

    names = option_names([("gate", GateOptions), ("other", Other)], reserved={"--quick"})
    assert names[("gate", "warmup")] == "--warmup" and names[("other", "warmup")] == "--other-warmup"
    assert names[("other", "quick")] == "--other-quick"


def test_the_gate_options_have_the_timing_knobs_as_their_own_fields_and_hand_them_over_whole():
    timing = [f.name for f in dataclasses.fields(TimingOptions)]
    gate = [f.name for f in dataclasses.fields(GateOptions)]
    assert gate[:len(timing)] == timing
    opts = GateOptions(reps=7, max_noise=0.02, flush_l2=False)
    assert opts.timing == TimingOptions(reps=7, max_noise=0.02, flush_l2=False)
    assert dataclasses.asdict(opts)["reps"] == 7            # flat: run.json and the config file keep gate.reps


def test_quick_is_one_draw_without_repeat_or_post_timing_checks():
    q = GateOptions.quick(reps=5)
    assert (q.extra_draws, q.repeat_check, q.check_after_timing, q.reps) == (0, False, False, 5) and not q.strict
    assert GateOptions().strict and LoopConfig().to_json()["roof_stop"] == 0.9


def test_every_numeric_setting_declares_a_ceiling():
    """Issue 33: --reps, --seed, --candidates and --tune-budget at 10^23 got past every check to
    the GPU probe.  Every int or float setting (of a list too) of every section declares a max (or
    a below), so a value past any sense is refused by the one validator, and its words name the
    bound that was crossed."""
    import typing

    import pytest

    from kernel_forge.common.errors import InputError
    from kernel_forge.config.build import OnCommandLine, check_value
    from kernel_forge.config.describe import DescribeConfig
    from kernel_forge.config.sections import RUN_SECTIONS
    from kernel_forge.common.setting import fields_of, strip_optional

    numeric = 0
    for section, cls in [*RUN_SECTIONS, ("describe", DescribeConfig)]:
        for f in fields_of(cls):
            inner, _ = strip_optional(f.annotation)
            if typing.get_origin(inner) in (list, tuple):
                inner = typing.get_args(inner)[0]
            if inner not in (int, float):
                continue
            numeric += 1
            assert f.spec.max is not None or f.spec.below is not None, f"{section}.{f.name} has no ceiling"
            with pytest.raises(InputError, match=r": must be (at most|<) "):
                check_value(10**23, inner, f.spec, OnCommandLine({}), section, f.name)
    assert numeric >= 40
