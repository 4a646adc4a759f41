"""Tests of kernel_forge/gpu/kernel_clock.py: CUPTI kernel records to launch times, without a GPU."""
from __future__ import annotations

import pytest

from kernel_forge.gpu import kernel_clock
from kernel_forge.gpu.kernel_clock import KernelRecord, launch_times


def rec(name, start, end):
    return KernelRecord(name, start, end)


def test_delimited_launches_are_the_kernels_after_each_harness_kernel():
    records = [rec("kf_flush", 0, 10), rec("kf_discard", 10, 12), rec("cand", 20, 30),
               rec("kf_flush", 40, 50), rec("kf_discard", 50, 52), rec("cand", 60, 75)]
    assert launch_times(records, 2, delimited=True) == [0.01, 0.015]


def test_a_launch_of_several_kernels_is_timed_from_first_start_to_last_end():
    records = [rec("kf_flush", 0, 10), rec("gemm_a", 100, 200), rec("gemm_b", 250, 1300),
               rec("kf_flush", 2000, 2100), rec("gemm_a", 3000, 4000)]
    assert launch_times(records, 2, delimited=True) == [1.2, 1.0]


def test_records_before_the_first_harness_kernel_are_not_a_launch():
    records = [rec("leftover", 0, 5), rec("kf_mark", 6, 7), rec("cand", 8, 18)]
    assert launch_times(records, 1, delimited=True) == [0.01]


def test_a_count_that_does_not_match_the_launches_gives_none():
    records = [rec("kf_flush", 0, 10), rec("cand", 20, 30)]
    assert launch_times(records, 2, delimited=True) is None
    assert launch_times([], 1, delimited=False) is None


def test_undelimited_records_count_one_launch_each_and_skip_harness_kernels():
    records = [rec("cand", 0, 1000), rec("kf_fingerprint", 1000, 1100), rec("cand", 2000, 2500)]
    assert launch_times(records, 2, delimited=False) == [1.0, 0.5]



def test_the_launch_offset_comes_off_each_launch_once_and_never_below_zero():
    records = [rec("kf_flush", 0, 10), rec("gemm_a", 1000, 2000), rec("gemm_b", 2000, 5000),
               rec("kf_flush", 6000, 6100), rec("tiny", 7000, 7300)]
    assert launch_times(records, 2, delimited=True, offset_us=0.86) == pytest.approx([4.0 - 0.86, 0.0])
    backwards = [rec("kf_flush", 0, 10), rec("cand", 500, 400)]
    assert launch_times(backwards, 1, delimited=True) is None               # the caller falls back to events


class FakeCupti:
    """cupti-python's activity calls as the clock uses them: records exist only while the kind
    is enabled, and reach the registered callback on a flush."""

    class ActivityKind:
        KERNEL, CONCURRENT_KERNEL, MEMCPY = 3, 10, 1

    def __init__(self):
        self.enabled: set[int] = set()
        self.calls: list[tuple] = []
        self.pending: list = []
        self.completed = None

    def activity_register_callbacks(self, requested, completed):
        self.completed = completed

    def activity_enable(self, kind):
        self.calls.append(("enable", kind))
        self.enabled.add(kind)

    def activity_disable(self, kind):
        self.calls.append(("disable", kind))
        self.enabled.discard(kind)

    def launch(self, name, start, end, kind=3):
        if kind in self.enabled:
            self.pending.append(type("A", (), {"kind": kind, "name": name, "start": start, "end": end})())

    def activity_flush_all(self, flag):
        got, self.pending = self.pending, []
        if got and self.completed:
            self.completed(got)


def test_the_clock_records_kernel_activity_only_between_mark_and_pause(monkeypatch):
    cupti = FakeCupti()
    monkeypatch.setitem(__import__("sys").modules, "cupti", type("M", (), {"cupti": cupti}))
    monkeypatch.delenv("KFORGE_CLOCK", raising=False)
    monkeypatch.setattr(kernel_clock, "_clock", None)
    monkeypatch.setattr(kernel_clock, "_reason", None)
    assert kernel_clock.enable() is None
    clock = kernel_clock.clock()
    assert cupti.calls == [("enable", FakeCupti.ActivityKind.KERNEL)]   # serialized kernels: no instrumentation
    clock.pause()
    cupti.launch("upload_check", 0, 10)                                  # outside a timed loop: no record made
    clock.mark()
    cupti.launch("kf_flush", 20, 30)
    cupti.launch("cand", 40, 1040)
    cupti.launch("memcpy", 50, 60, kind=FakeCupti.ActivityKind.MEMCPY)  # not a kernel: ignored
    got = clock.collect()
    clock.pause()
    cupti.launch("after", 2000, 3000)
    assert [r.name for r in got] == ["kf_flush", "cand"] and clock.collect() == []

    assert [c[0] for c in cupti.calls] == ["enable", "disable", "enable", "disable"]


def test_the_clock_takes_the_offset_chosen_for_its_gpu(monkeypatch, tmp_path):
    """for_device: the environment's value, else the measured one (tests/gpu/test_clock_offset.py)."""
    import types

    from kernel_forge.gpu import clock_offset

    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KFORGE_CLOCK_OFFSET_US", "1.25")
    info = types.SimpleNamespace(name="NVIDIA B200", driver_version="13.0", sms=148)
    clock = kernel_clock.KernelClock(FakeCupti())
    got = clock.for_device(info, stream=None)
    assert (clock.offset_us, clock.offset_source) == (1.25, "KFORGE_CLOCK_OFFSET_US") and got["offset_us"] == 1.25
    monkeypatch.delenv("KFORGE_CLOCK_OFFSET_US")
    flushes = []
    monkeypatch.setattr(clock_offset, "measure",
                        lambda clk, stream, sms, flush=None: (flushes.append(flush),
                                                              ([2.4, 2.5, 2.45, 2.43], [1.6, 1.55, 1.62]))[1])
    clock.for_device(info, stream=None, flush="the gate's flush")
    assert clock.offset_source == "measured" and clock.offset_us == pytest.approx(2.45 - 1.6 + 0.0, abs=0.03)
    assert flushes == ["the gate's flush"]           # R is measured after the gate's own flush


def test_the_clock_is_off_when_asked(monkeypatch):
    monkeypatch.setenv("KFORGE_CLOCK", "events")
    monkeypatch.setattr(kernel_clock, "_clock", None)
    monkeypatch.setattr(kernel_clock, "_reason", None)
    assert kernel_clock.enable() == "KFORGE_CLOCK=events"
    assert kernel_clock.clock() is None
    assert kernel_clock.reason() == "KFORGE_CLOCK=events"


def test_without_cupti_python_the_reason_says_how_to_install_it(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_cupti(name, *a, **kw):
        if name == "cupti" or name.startswith("cupti."):
            raise ImportError("No module named 'cupti'")
        return real(name, *a, **kw)

    monkeypatch.delenv("KFORGE_CLOCK", raising=False)
    monkeypatch.setattr(kernel_clock, "_clock", None)
    monkeypatch.setattr(kernel_clock, "_reason", None)
    monkeypatch.setattr(builtins, "__import__", no_cupti)
    why = kernel_clock.enable()
    assert why is not None and "pip install cupti-python" in why
    assert kernel_clock.clock() is None


def test_records_are_collected_in_start_order_and_a_collect_with_records_verifies_the_clock():
    cupti = FakeCupti()
    clock = kernel_clock.KernelClock(cupti)
    cupti.activity_register_callbacks(clock._requested, clock._completed)
    cupti.activity_enable(clock.kind)
    clock.mark()
    assert clock.collect() == [] and not clock.verified
    cupti.launch("cand", 500, 900)
    cupti.launch("kf_flush", 100, 200)
    cupti.launch("cand", 500, 600)
    got = clock.collect()
    assert [(r.name, r.start_ns, r.end_ns) for r in got] == [("kf_flush", 100, 200), ("cand", 500, 600),
                                                             ("cand", 500, 900)]
    assert [r.harness for r in got] == [True, False, False] and clock.verified


def test_a_cupti_that_refuses_the_records_leaves_the_clock_off_with_the_reason(monkeypatch):
    cupti = FakeCupti()

    def busy(kind):
        raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")

    cupti.activity_enable = busy
    monkeypatch.setitem(__import__("sys").modules, "cupti", type("M", (), {"cupti": cupti}))
    monkeypatch.delenv("KFORGE_CLOCK", raising=False)
    monkeypatch.setattr(kernel_clock, "_clock", None)
    monkeypatch.setattr(kernel_clock, "_reason", None)
    why = kernel_clock.enable()
    assert why == "CUPTI refused kernel activity records (RuntimeError: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)"
    assert kernel_clock.clock() is None and kernel_clock.reason() == why
    kernel_clock.disable("records never arrived")
    assert kernel_clock.reason() == "records never arrived"
