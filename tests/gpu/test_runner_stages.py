"""The stages of one worker run (gpu/runner.py: CaseRunner._run and the per-run _CaseRun they
share), one at a time, on the NumPy stand-in for CuPy and the driver of tests/fake_gpu.py: no GPU."""
from __future__ import annotations

import types

import numpy as np
import pytest

import kernel_forge.gpu.runner as runner_mod
from kernel_forge.gpu.runner import CaseRunner, _KernelLaunch, _Laps
from kernel_forge.model.worker_protocol import FIRST, REPEAT, KernelSpec, RunPlan

import fake_gpu
from test_runner import task  # noqa: F401  (fixture)


def test_the_laps_add_up_the_time_of_each_named_part(monkeypatch):
    clock = iter([10.0, 10.5, 12.0, 12.25, 13.0])
    monkeypatch.setattr(runner_mod, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    laps = _Laps()
    for part in ("upload", "launches", "upload", "compare"):
        laps.lap(part)
    assert laps.secs == {"upload": 0.5 + 0.25, "launches": 1.5, "compare": 0.75}
    assert list(laps.secs) == ["upload", "launches", "compare"]       # the order the parts first ran


def test_a_kernel_launch_reads_the_module_at_each_call_so_a_reloaded_module_is_the_one_launched(monkeypatch):
    """A module whose globals cannot be restored in place is loaded afresh before every launch
    (_Loaded.initial_state): the launch must not hold on to the module it was bound with."""
    launched = []
    monkeypatch.setattr(runner_mod.driver, "launch",
                        lambda module, grid, block, smem, stream, args, *, cooperative: launched.append(
                            (module, grid, block, smem, stream, args, cooperative)))
    loaded = types.SimpleNamespace(module="first load")
    config = types.SimpleNamespace(grid=(4, 1, 1), block=(256, 1, 1), shared_mem=1024)
    launch = _KernelLaunch(loaded, config, 0x5000, "packed", True)
    launch()
    loaded.module = "second load"
    launch()
    assert launched == [("first load", (4, 1, 1), (256, 1, 1), 1024, 0x5000, "packed", True),
                        ("second load", (4, 1, 1), (256, 1, 1), 1024, 0x5000, "packed", True)]


@pytest.fixture
def runner(task, monkeypatch):  # noqa: F811
    fake_gpu.install(monkeypatch)
    return CaseRunner(task)


def _baseline(task) -> KernelSpec:  # noqa: F811
    ref = task.baselines["cupy_add"]
    return KernelSpec(kind="python", label="baseline:cupy_add", module_path=str(ref.path), function=ref.function)


def test_the_checked_launches_make_two_stages_the_second_the_same_as_the_first(runner, task):  # noqa: F811
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


def test_a_kept_copy_written_after_its_stage_is_seen_when_the_copies_are_checked(runner, task):  # noqa: F811
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


def test_closing_a_run_holds_the_distinct_stages_for_the_sample_and_reports_them(runner, task):  # noqa: F811
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
