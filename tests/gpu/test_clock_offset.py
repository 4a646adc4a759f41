"""The kernel clock's launch offset: measured on the GPU when the worker starts, cached per GPU
model and driver, cross-checked against the H200 figure, overridden by KFORGE_CLOCK_OFFSET_US
(gpu/clock_offset.py).  The measurement itself runs on the GPU (tests/gpu/test_timing_gpu.py); here
its arithmetic, the cache and the choice, with a scripted measurement."""
from __future__ import annotations

import json

import pytest

from kernel_forge.common.errors import InputError
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


def test_the_offset_is_the_trimmed_mean_record_excess_less_the_launch_gap():
    value, why = clock_offset.derive(H200_R, H200_N, "NVIDIA H200")
    r = (2.385 + 2.432 + 2.464 + 2.528) / 4          # the middle of 6: one left out at each end
    n = (1.57 + 1.62 + 1.66) / 3
    assert why == "" and value == pytest.approx(r - n, abs=1e-9)
    assert clock_offset.cross_check(value, "NVIDIA H200") == ""       # within 0.4 µs of 0.86


def test_a_trimmed_mean_of_timer_steps_lands_between_the_steps():
    # %globaltimer in 256 ns steps: gaps of 1.54 µs read as 1.536 or 1.792 by phase; a median
    # gives one step, the trimmed mean of many the value between
    steps = [1.536] * 9 + [1.792] * 3 + [1.28] * 2
    assert clock_offset.trimmed_mean(steps) == pytest.approx((9 * 1.536 + 1.792) / 10)
    assert sorted(steps)[len(steps) // 2] == 1.536                # the median: one step
    assert clock_offset.trimmed_mean([5.0, 1.0]) == 3.0          # too few to trim: all of them


def test_extra_samples_of_the_measurement_are_kept_beside_r_and_n(cache):
    got = clock_offset.choose("NVIDIA H200", "13.0",
                              lambda: (H200_R, H200_N, {"R_back_to_back": [2.08, 2.1, 1.95]}))
    assert got.samples["R_back_to_back"] == [2.08, 2.1, 1.95] and got.samples["R"] == H200_R
    assert got.record_minus_span_us == pytest.approx(2.4523, abs=1e-4)


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
    from kernel_forge.gate.gate import Gate
    from kernel_forge.model.task import load_task

    from tests.support.paths import ROOT

    monkeypatch.setenv("KFORGE_CLOCK_OFFSET_US", "fast")
    with pytest.raises(InputError, match="not a number"):
        Gate(load_task(ROOT / "manifests" / "vector_add.json"))


def test_the_spin_kernel_compiles_for_sm90_without_spills():
    res = compile_source(clock_offset.SOURCE, arch="sm_90", file_label="spin.cu").resources
    assert res.get("spill_stores", 0) + res.get("spill_loads", 0) == 0
    assert clock_offset.KERNEL.startswith("kf_")     # a harness kernel for the clock's bookkeeping


class _Timeline:
    """A simulated GPU for clock_offset.measure: a record spans 1.0 µs of front end before the
    first block starts and 1.45 µs after the last block ends when the launch follows a flush
    (0.63 µs before when it is queued behind another spin); a queued second kernel's first block
    starts 1.54 µs after the first kernel's last block ended."""

    def __init__(self):
        self.t = 1_000_000
        self.records = []
        self.recording = True
        self.flushed = False
        self.last_end = None
        self.paused_launches = 0

    # the clock's interface
    def mark(self):
        self.records.clear()
        self.recording = True

    def pause(self):
        self.recording = False

    def collect(self):
        from kernel_forge.gpu.kernel_clock import KernelRecord
        out, self.records = self.records, []
        return out

    def flush(self, stream):
        from kernel_forge.gpu.kernel_clock import KernelRecord
        self.t += 50_000
        if self.recording:
            self.records.append(KernelRecord("kf_flush", self.t - 50_000, self.t))
        self.flushed = True

    def spin(self, grid, block, args):
        from kernel_forge.gpu.kernel_clock import KernelRecord
        buf, ns = args
        blocks = grid[0]
        if not self.recording and self.last_end is not None and not self.flushed:
            start = self.last_end + 1540          # queued behind the previous spin
            rec_start = start
        else:
            rec_start = self.t
            start = rec_start + (1000 if self.flushed else 630)
        end = start + int(ns)
        for b in range(blocks):
            buf.a[2 * b], buf.a[2 * b + 1] = start, end
        if self.recording:
            self.records.append(KernelRecord("kf_clock_spin", rec_start, end + 1450))
        self.t = end + 1450
        self.last_end = end
        self.flushed = False


def test_the_measurement_takes_r_after_the_flush_and_n_from_queued_pairs(monkeypatch):
    """clock_offset.measure's plumbing on the fake GPU: which launches give R, which N."""
    from tests.support import fake_gpu

    fake_gpu.install(monkeypatch)
    tl = _Timeline()
    fake_gpu.KERNELS["kf_clock_spin"] = tl.spin

    class Stream:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            tl.last_end = None if tl.recording else tl.last_end

    r, n, extra = clock_offset.measure(tl, Stream(), 4, flush=tl.flush)
    assert len(r) == 2 * len(clock_offset.SPINS_NS) * clock_offset.REPEATS
    assert r == pytest.approx([2.45] * len(r))                 # 1.0 before + 1.45 after, flushed
    assert extra["R_back_to_back"] == pytest.approx([2.08] * len(r))
    assert len(n) == 2 * clock_offset.PAIRS and n == pytest.approx([1.54] * len(n))
    value, why = clock_offset.derive(r, n, "NVIDIA H200")
    assert why == "" and value == pytest.approx(0.91)
    assert not tl.recording                                    # left paused


@pytest.mark.gpu
def test_the_worker_measures_the_offset_on_this_gpu_and_caches_it(cache):
    """A fresh cache: the worker measures the offset when it starts; a second worker reads it."""
    from kernel_forge.gate.gate import Gate
    from kernel_forge.model.task import load_task

    from tests.support.paths import ROOT

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
