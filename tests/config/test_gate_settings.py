"""Tests of kernel_forge/config/gate_settings.py: the gate's settings, --quick, --devices and --arch."""
from __future__ import annotations

import dataclasses

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.config.build import InFile, check_values
from kernel_forge.config.gate_settings import QUICK, GateOptions, TimingOptions, check_arch, devices_syntax


def test_devices_are_ordinals_each_once_or_all_read_without_a_gpu():
    assert devices_syntax("0,1") == [0, 1] and devices_syntax(" 3 , 1 ") == [3, 1]
    assert devices_syntax(" ALL ") == "all" and devices_syntax("") == [] and devices_syntax("  ") == []
    for bad in ("0,0", "gpu0", "-1", "0;1", "1,", 2):
        assert devices_syntax(bad) is None, bad


def test_a_repeated_device_is_refused_naming_the_setting():
    with pytest.raises(InputError) as info:
        check_values(GateOptions, {"devices": "1,1"}, InFile("opt.json"))
    assert str(info.value) == "opt.json: $.gate.devices: must be GPU ordinals like 0,1 (each once) or all, got '1,1'"
    assert check_values(GateOptions, {"devices": "0, 1"}, InFile("opt.json")) == {"devices": "0, 1"}


def test_an_arch_is_refused_in_the_same_words_wherever_it_was_given():
    check_arch("sm_90")
    check_arch("sm_90a")
    check_arch("sm_100f")
    for where, said in (("--arch", "--arch 'compute_90': "), ("arch", "arch: ")):
        with pytest.raises(InputError) as info:
            check_arch("compute_90", where=where)
        assert str(info.value) == said + "must be like sm_90, got 'compute_90'"


def test_quick_is_one_draw_no_repeat_and_only_the_last_timed_launch_checked():
    assert GateOptions().strict
    quick = GateOptions.quick(reps=5)
    assert (quick.extra_draws, quick.repeat_check, quick.check_after_timing, quick.reps) == (0, False, False, 5)
    assert not quick.strict
    assert QUICK == {"extra_draws": 0, "repeat_check": False, "check_after_timing": False}
    # any one of the three checks off is not strict
    assert not GateOptions(extra_draws=0).strict and not GateOptions(repeat_check=False).strict
    assert not GateOptions(check_after_timing=False).strict


def test_the_worker_gets_every_timing_knob_and_only_those():
    opts = GateOptions(reps=7, warmup=1, flush_l2=False, max_noise=0.01, seed=9, sanitize=True)
    timing = opts.timing
    assert type(timing) is TimingOptions
    assert timing == TimingOptions(reps=7, warmup=1, flush_l2=False, max_noise=0.01)
    names = {f.name for f in dataclasses.fields(TimingOptions)}
    assert names < {f.name for f in dataclasses.fields(GateOptions)} and "seed" not in names
