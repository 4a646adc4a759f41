"""Tests of kernel_forge/gpu/timed_launches.py, on tests/fake_gpu.py's stand-in (its events say 20 µs)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import fake_gpu
from kernel_forge.config.gate_settings import TimingOptions
from kernel_forge.gpu.case_inputs import CaseInputs
from kernel_forge.gpu.case_run import CaseRun, Laps
from kernel_forge.gpu.mask import host_mask
from kernel_forge.gpu.resident import Resident
from kernel_forge.gpu.timed_launches import time_launches
from kernel_forge.model.task import load_task
from kernel_forge.model.worker_protocol import (AFTER_TIMING, FIRST, KernelSpec, Observation, RunPlan, StageObservation,
                                                mid_timing)

ROOT = Path(__file__).resolve().parents[2]
TASK = load_task(ROOT / "manifests" / "vector_add.json")


@pytest.fixture
def setup(monkeypatch):
    """(make_run, state): a CaseRun of vector_add's tiny case whose first checked launch is done, and what the
    launches, preparations and flushes did."""
    fake_gpu.install(monkeypatch)
    cp = sys.modules["cupy"]
    stream = cp.cuda.Stream()
    state = {"launches": 0, "preps": 0, "drift": False}

    def make_run(*, mask_key=None, estimate=20e-6, **plan_kw):
        bufs = CaseInputs(TASK, stream, Resident(1 << 30)).upload(TASK.case("tiny"), 5)
        a, b, c = bufs.const["a"].a, bufs.const["b"].a, bufs.work["c"]

        def launch():
            state["launches"] += 1
            c.a[:] = a + b + (np.float32(state["launches"]) if state["drift"] else np.float32(0))

        plan_kw.setdefault("timing", TimingOptions(reps=10, min_reps=10, warmup=3, max_noise=0, timing_budget_s=1.0))
        run = CaseRun(spec=KernelSpec(kind="cuda", label="k.cu"),
                      plan=RunPlan(case="tiny", seed=5, time=True, **plan_kw),
                      obs=Observation(case="tiny", seed=5), bufs=bufs, laps=Laps(), progress=lambda p: None, need=None,
                      outputs=["c"], out_arrays={"c": c}, run_key=1234, mask_key=mask_key, stream=stream,
                      launch=launch, estimate=estimate)
        launch()                                              # the first checked launch, as a stage
        run.stages.append((StageObservation(stage=FIRST, fingerprints=run.output_fingerprints()), {"c": c}))
        state["launches"] = 0
        return run

    def prep():
        state["preps"] += 1

    return make_run, state, prep


def test_the_counts_come_from_the_launch_s_time_and_the_cost_around_it(setup):
    make_run, state, prep = setup
    run = make_run(extra_warmup=2)
    flusher = fake_gpu.FakeFlusher(1 << 20)
    time_launches(run, TASK, flusher, None, prep)
    obs = run.obs
    # 20 µs a launch and 20 µs around it: the budgets allow far more than the maxima, 10 timed and 3 (+2) warm-up
    assert (obs.warmup, obs.reps) == (5, 10) and state["launches"] == 15
    assert state["preps"] == 1 + 15                           # once for the measurement of the cost, then every launch
    assert flusher.calls == ["flush"] * 11                    # likewise: the L2 flushed before each timed launch
    assert obs.timing.samples_us == (20.0,) * 10 and obs.timing.flushed and obs.timing.method == "events"


def test_a_small_timing_budget_cuts_the_timed_launches_to_it_and_without_an_estimate_one_launch_is_measured(setup):
    make_run, state, prep = setup
    run = make_run(estimate=None, timing=TimingOptions(reps=100, min_reps=5, warmup=10, min_warmup=2, max_noise=0,
                                                       timing_budget_s=40e-6 * 7.5, warmup_budget_s=0))
    time_launches(run, TASK, fake_gpu.FakeFlusher(1 << 20), None, prep)
    assert (run.obs.warmup, run.obs.reps) == (2, 7)          # 7 launches of 40 µs fit; warm-up: its minimum
    assert state["launches"] == 1 + 2 + 7


def test_an_honest_kernel_s_timed_outputs_are_the_first_launch_s_and_not_kept_again(setup):
    make_run, state, prep = setup
    run = make_run()
    time_launches(run, TASK, fake_gpu.FakeFlusher(1 << 20), None, prep)
    stages = {s.stage: (s, arrays) for s, arrays in run.stages}
    assert list(stages) == [FIRST, AFTER_TIMING, mid_timing(5)]   # the launch half way through the first batch
    assert run.obs.snap_at == 5
    for name in (AFTER_TIMING, mid_timing(5)):
        stage, arrays = stages[name]
        assert stage.same_as == FIRST and arrays == {}


def test_a_kernel_whose_timed_outputs_differ_leaves_them_and_the_kept_launch_s_masked_copy(setup):
    make_run, state, prep = setup
    state["drift"] = True
    run = make_run(mask_key=0xBEEF, extra_warmup=0)
    time_launches(run, TASK, fake_gpu.FakeFlusher(1 << 20), None, prep)
    stages = {s.stage: (s, arrays) for s, arrays in run.stages}
    last, last_arrays = stages[AFTER_TIMING]
    assert last.same_as is None and last_arrays == {"c": run.out_arrays["c"]}      # the work buffer itself
    kept, kept_arrays = stages[mid_timing(5)]
    assert kept.same_as is None and kept.stage in run.masked
    a, b = run.bufs.const["a"].a, run.bufs.const["b"].a
    # 3 warm-up launches, then timed launches 0..5: the copy is of the 9th launch's outputs, masked
    assert np.array_equal(host_mask(np.asarray(kept_arrays["c"].a), 0xBEEF), a + b + np.float32(9))
    assert kept.later_fingerprints == kept.fingerprints     # nothing wrote over the kept copy afterwards


def test_without_the_chosen_launch_only_the_last_one_is_a_stage(setup):
    make_run, state, prep = setup
    run = make_run(after_timing=False)
    time_launches(run, TASK, fake_gpu.FakeFlusher(1 << 20), None, prep)
    assert [s.stage for s, _ in run.stages] == [FIRST, AFTER_TIMING] and run.obs.snap_at is None


def test_without_the_flush_the_buffers_are_warmed_and_each_timed_launch_is_marked(setup):
    make_run, state, prep = setup
    run = make_run(timing=TimingOptions(reps=10, min_reps=10, warmup=3, max_noise=0, timing_budget_s=1.0,
                                        flush_l2=False))
    flusher = fake_gpu.FakeFlusher(1 << 20)
    time_launches(run, TASK, flusher, None, prep)
    assert flusher.calls == ["warm", "mark"] * 10 and not run.obs.timing.flushed
