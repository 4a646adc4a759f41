"""The kernel clock's launch offset: measured on the GPU when the worker starts, cached per GPU
model and driver, cross-checked against the H200 figure, overridden by KFORGE_CLOCK_OFFSET_US
(gpu/clock_offset.py).  The measurement itself runs on the GPU (tests/test_gpu_timing.py); here
its arithmetic, the cache and the choice, with a scripted measurement."""
from __future__ import annotations

import json

import pytest

from kernel_forge.errors import InputError
from kernel_forge.gpu import clock_offset
from kernel_forge.gpu.nvrtc import compile_source

# the H200 probe's numbers (FINDINGS.md): record - span of single-wave spin kernels, and the gap
# ncu counts beyond a kernel's own span
H200_R = [2.432, 2.385, 2.528, 2.464, 2.272, 2.816]
H200_N = [1.57, 1.66, 1.76, 1.62, 1.55]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KFORGE_CLOCK_OFFSET_US", raising=False)
    return tmp_path


class Measure:
    def __init__(self, r=H200_R, n=H200_N, fail=None):
        self.r, self.n, self.fail, self.calls = r, n, fail, 0

    def __call__(self):
        self.calls += 1
        if self.fail:
            raise self.fail
        return list(self.r), list(self.n)


def test_the_offset_is_the_median_record_excess_less_the_launch_gap():
    value, why = clock_offset.derive(H200_R, H200_N, "NVIDIA H200")
    assert why == "" and value == pytest.approx(2.448 - 1.62, abs=1e-6)
    assert clock_offset.cross_check(value, "NVIDIA H200") == ""       # within 0.4 µs of 0.86


def test_a_measurement_is_made_once_and_then_read_from_the_cache(cache):
    m = Measure()
    first = clock_offset.choose("NVIDIA H200", "13.0", m)
    again = clock_offset.choose("NVIDIA H200", "13.0", m)
    assert m.calls == 1 and first.source == "measured" and again.source == "cached"
    assert again.offset_us == pytest.approx(first.offset_us, abs=1e-4)
    stored = json.loads((cache / "clock-offset.json").read_text())
    assert list(stored) == ["NVIDIA H200 | driver 13.0"] and stored["NVIDIA H200 | driver 13.0"]["samples"]["R"]
    other = clock_offset.choose("NVIDIA H200", "13.1", m)           # another driver: measured again
    assert m.calls == 2 and other.source == "measured"
    assert len(json.loads((cache / "clock-offset.json").read_text())) == 2


def test_an_unreadable_or_foreign_cache_is_measured_again(cache):
    (cache / "clock-offset.json").write_text("{not json")
    m = Measure()
    assert clock_offset.choose("NVIDIA H200", "13.0", m).source == "measured" and m.calls == 1
    data = json.loads((cache / "clock-offset.json").read_text())
    data["NVIDIA H200 | driver 13.0"]["method"] = "an older method"
    (cache / "clock-offset.json").write_text(json.dumps(data))
    assert clock_offset.choose("NVIDIA H200", "13.0", m).source == "measured" and m.calls == 2


def test_a_measurement_far_from_the_h200_figure_is_used_with_a_warning():
    got = clock_offset.choose("NVIDIA H200", "13.0", Measure(r=[4.0] * 6, n=[1.6] * 5))
    assert got.offset_us == pytest.approx(2.4) and got.source == "measured"
    assert "0.86" in got.warning and "2.400" in got.warning


def test_another_gpu_gets_its_own_measurement_not_zero():
    got = clock_offset.choose("NVIDIA B200", "13.0", Measure(r=[2.0] * 6, n=[1.3] * 5))
    assert got.offset_us == pytest.approx(0.7) and got.warning == "" and got.known_us is None


@pytest.mark.parametrize("measure, gpu, value, source", [
    (Measure(fail=RuntimeError("CUPTI gave no records")), "NVIDIA H200", 0.86, "table"),
    (Measure(fail=RuntimeError("CUPTI gave no records")), "NVIDIA B200", 0.0, "none"),
    (Measure(r=[1.0] * 6, n=[1.6] * 5), "NVIDIA H200", 0.86, "table"),     # negative: implausible
    (Measure(r=[9.0] * 6, n=[1.0] * 5), "NVIDIA B200", 0.0, "none"),      # 8 µs: implausible
    (Measure(r=[2.0, 2.1], n=[1.0] * 5), "NVIDIA B200", 0.0, "none"),     # too few samples
])
def test_a_failed_or_implausible_measurement_falls_back_and_says_why(cache, measure, gpu, value, source):
    got = clock_offset.choose(gpu, "13.0", measure)
    assert (got.offset_us, got.source) == (value, source)
    assert "could not be measured" in got.warning
    assert not (cache / "clock-offset.json").exists()       # nothing cached from a failure


@pytest.mark.parametrize("env, value", [("0.86", 0.86), ("0", 0.0), (" 1.5 ", 1.5)])
def test_the_environment_overrides_everything(env, value, monkeypatch):
    monkeypatch.setenv("KFORGE_CLOCK_OFFSET_US", env)
    m = Measure()
    got = clock_offset.choose("NVIDIA H200", "13.0", m)
    assert (got.offset_us, got.source, m.calls) == (value, "KFORGE_CLOCK_OFFSET_US", 0)


@pytest.mark.parametrize("env", ["abc", "nan", "inf", "-1", "51", "0.8us"])
def test_a_bad_environment_value_is_refused_with_what_to_do(env, monkeypatch):
    monkeypatch.setenv("KFORGE_CLOCK_OFFSET_US", env)
    with pytest.raises(InputError) as info:
        clock_offset.env_offset()
    assert "KFORGE_CLOCK_OFFSET_US" in str(info.value) and info.value.exit_code == 2 and info.value.hint


def test_a_bad_environment_value_stops_the_gate_before_any_worker(monkeypatch):
    from kernel_forge.gate import Gate
    from kernel_forge.task import load_task

    from conftest import ROOT

    monkeypatch.setenv("KFORGE_CLOCK_OFFSET_US", "fast")
    with pytest.raises(InputError, match="not a number"):
        Gate(load_task(ROOT / "manifests" / "vector_add.json"))


def test_the_spin_kernel_compiles_for_sm90_without_spills():
    res = compile_source(clock_offset.SOURCE, arch="sm_90", file_label="spin.cu").resources
    assert res.get("spill_stores", 0) + res.get("spill_loads", 0) == 0
    assert clock_offset.KERNEL.startswith("kf_")     # a harness kernel for the clock's bookkeeping


@pytest.mark.gpu
def test_the_worker_measures_the_offset_on_this_gpu_and_caches_it(cache):
    """A fresh cache: the worker measures the offset when it starts; a second worker reads it."""
    from kernel_forge.gate import Gate
    from kernel_forge.task import load_task

    from conftest import ROOT

    task = load_task(ROOT / "manifests" / "vector_add.json")
    with Gate(task) as gate:
        gate.ensure_gpu()
        got = gate.clock_offset
        if gate._worker.clock != "cupti":
            pytest.skip(f"no kernel clock here: {gate._worker.clock}")
        print(json.dumps(got))
        assert got["source"] == "measured", got
        assert 0.0 <= got["offset_us"] <= clock_offset.MAX_US
        assert len(got["samples"]["R"]) >= 3 and len(got["samples"]["N"]) >= 3
        if gate.device["name"] in clock_offset.KNOWN_US:    # the H200: within the cross-check's band
            assert got["warning"] == "", got["warning"]
        assert gate.device["clock_offset"] == got            # recorded with the device (env.json)
    with Gate(task) as again:
        again.ensure_gpu()
        assert again.clock_offset["source"] == "cached"
        assert again.clock_offset["offset_us"] == pytest.approx(got["offset_us"], abs=1e-3)
