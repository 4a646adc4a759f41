"""The stages of one worker run (gpu/runner.py: CaseRunner._run and the per-run CaseRun they
share, gpu/case_run.py), one at a time, on the NumPy stand-in for CuPy and the driver of
tests/support/fake_gpu.py: no GPU."""
from __future__ import annotations

import numpy as np
import pytest

from kernel_forge.gpu.runner import CaseRunner
from kernel_forge.model.worker_protocol import FIRST, REPEAT, KernelSpec, RunPlan

from tests.support import fake_gpu
from tests.support.in_process_gate import vector_add_task


@pytest.fixture
def task(tmp_path):
    return vector_add_task(tmp_path)


@pytest.fixture
def runner(task, monkeypatch):
    fake_gpu.install(monkeypatch)
    return CaseRunner(task)


def _baseline(task) -> KernelSpec:
    ref = task.baselines["cupy_add"]
    return KernelSpec(kind="python", label="baseline:cupy_add", module_path=str(ref.path), function=ref.function)


def test_the_checked_launches_make_two_stages_the_second_the_same_as_the_first(runner, task):
    progress = []
    run = runner._open_run(_baseline(task), RunPlan(case="odd", seed=1), progress.append, None)
    assert run.loaded is None and run.obs.input_fingerprints.keys() == {"a", "b"}
    assert list(run.obs.seconds) == ["upload"]
    runner._checked_launches(run)
    assert [p.stage for p in progress] == ["launch", "launched"]
    assert run.estimate is not None and run.obs.first_launch_s == run.estimate
    first, second = (s for s, _ in run.stages)
    assert (first.stage, first.same_as, second.stage, second.same_as) == (FIRST, None, REPEAT, FIRST)
    kept, held = run.stages[0][1], run.stages[1][1]
    assert held == {}                                         # the same outputs are not held twice
    assert kept["c"] is not run.out_arrays["c"] and run.masked == {FIRST}    # a later launch follows: a masked copy
    assert set(run.obs.inputs_after) == {FIRST, REPEAT}
    assert list(run.obs.seconds) == ["upload", "launches", "fingerprints"]


def test_a_kept_copy_written_after_its_stage_is_seen_when_the_copies_are_checked(runner, task):
    run = runner._open_run(_baseline(task), RunPlan(case="odd", seed=1), lambda p: None, None)
    runner._checked_launches(run)
    runner._check_kept_copies(run)
    first = run.stages[0][0]
    assert first.later_fingerprints == first.fingerprints      # untouched since the first launch

    run = runner._open_run(_baseline(task), RunPlan(case="odd", seed=1), lambda p: None, None)
    runner._checked_launches(run)
    run.stages[0][1]["c"].a[:7] = np.float32(0.5)               # a later launch scribbles on the kept copy
    runner._check_kept_copies(run)
    first = run.stages[0][0]
    assert first.later_fingerprints != first.fingerprints
    assert run.stages[1][0].later_fingerprints is None          # a stage without arrays of its own is not read


def test_closing_a_run_holds_the_distinct_stages_for_the_sample_and_reports_them(runner, task):
    run = runner._open_run(_baseline(task), RunPlan(case="odd", seed=1, compare="none"), lambda p: None, None)
    runner._checked_launches(run)
    obs = runner._close_run(run)
    assert [s.stage for s in obs.stages] == [FIRST, REPEAT]
    assert not any(s.kept for s in obs.stages) and runner._kept == {}    # compare "none": nothing to sample
    run = runner._open_run(_baseline(task), RunPlan(case="odd", seed=1, compare="gpu"), lambda p: None, None)
    runner._checked_launches(run)
    obs = runner._close_run(run)
    assert [s.kept for s in obs.stages] == [True, False] and set(runner._kept) == {FIRST}
    assert runner._kept_key == run.mask_key
