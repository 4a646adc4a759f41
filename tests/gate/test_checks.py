"""The gate's verdicts (kernel_forge.gate.checks) on observations built here: no GPU, no worker."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kernel_forge.gate import checks
from kernel_forge.gate.checks import LoadContext, RunContext, before_launch, failure_finding, judge, outputs_of
from kernel_forge.common.dtypes import FLOAT32, poison_value
from kernel_forge.common.stats import summarize
from kernel_forge.model.task import load_task
from kernel_forge.model.verdict import REASONS
from kernel_forge.model.tolerance import compare
from kernel_forge.model.worker_protocol import AFTER_TIMING, FIRST, REPEAT, Failure, ModuleFacts, Observation, ResolvedLaunch, SampleValues, StageObservation, mid_timing

from tests.support.paths import ROOT

N = 5000
EXPECTED = np.linspace(-1.0, 1.0, N)
GOOD = EXPECTED.astype(np.float32)


@pytest.fixture(scope="module")
def task():
    return load_task(ROOT / "manifests" / "vector_add.json")


@pytest.fixture(scope="module")
def reduce_task():
    return load_task(ROOT / "manifests" / "reduce_sum.json")


def check(task, values) -> object:
    """The specification's OutputCheck of output c holding ``values``."""
    return compare("c", values, EXPECTED, FLOAT32, task.tolerance)


def stage(task, name, fp, values=None, *, same_as=None, later=None, kept=False):
    outputs = [] if same_as else [check(task, GOOD if values is None else values)]
    return StageObservation(stage=name, fingerprints={"c": fp}, same_as=same_as, outputs=outputs,
                            later_fingerprints=None if later is None else {"c": later}, kept=kept)


def stale():
    c = GOOD.copy()
    c[4000:] = poison_value(FLOAT32)
    return c


def jittered():
    # within atol 1e-6 + rtol 1e-6 of the reference, but not bit-for-bit the first launch's values
    return np.nextafter(GOOD, np.float32(2))


def ctx(task, **kw):
    return RunContext(task, draw=kw.pop("draw", 0), seed=kw.pop("seed", 0), expected={"c": EXPECTED}, **kw)


def full_run(task, **stages):
    """A passing strict run (first, repeat, after timing, timed launch 17), stages replaced by keyword."""
    default = {FIRST: stage(task, FIRST, 1),
               REPEAT: stage(task, REPEAT, 1, same_as=FIRST),
               AFTER_TIMING: stage(task, AFTER_TIMING, 1, same_as=FIRST),
               mid_timing(17): stage(task, mid_timing(17), 1, same_as=FIRST, later=1)}
    default.update({k.replace("_", " "): v for k, v in stages.items()})
    return Observation(case="odd", seed=0, stages=list(default.values()))


# -- the run checks ----------------------------------------------------------------------------

def test_identical_outputs_at_every_stage_pass(task):
    assert judge(full_run(task), ctx(task)) is None


@pytest.mark.parametrize("name, text", [(AFTER_TIMING, "after timing"), (mid_timing(17), "after timed launch 17")])
def test_stale_outputs_after_timing_are_caught(task, name, text):
    later = {"later": 2} if name != AFTER_TIMING else {}
    run = full_run(task, **{name.replace(" ", "_"): stage(task, name, 2, stale(), **later)})
    found = judge(run, ctx(task))
    assert found.reason == "stale_after_timing" and found.stage == name
    assert text in found.message and "1000 never written" in found.message
    assert found.message.startswith("draw 1 (seed 0), ")


def test_outputs_after_timing_that_differ_but_are_within_tolerance_pass(task):
    run = full_run(task, after_timing=stage(task, AFTER_TIMING, 3, jittered()),
                   **{"after_timed_launch_17": stage(task, mid_timing(17), 3, jittered(), later=3)})
    assert judge(run, ctx(task)) is None


def test_a_wrong_first_launch_is_a_mismatch_even_if_later_stages_are_right(task):
    run = full_run(task, **{"first_launch": stage(task, FIRST, 1, GOOD * 2)})
    found = judge(run, ctx(task, draw=1, seed=77))
    assert found.reason == "mismatch" and "draw 2 (seed 77), first launch" in found.message


def test_outputs_never_written_at_all_are_unwritten_not_mismatch(task):
    run = full_run(task, **{"first_launch": stage(task, FIRST, 1, np.full(N, poison_value(FLOAT32), np.float32))})
    assert judge(run, ctx(task)).reason == "unwritten"


def test_a_second_launch_that_differs_bit_for_bit_is_nondeterministic(task):
    run = full_run(task, second_launch=stage(task, REPEAT, 5, jittered()))
    found = judge(run, ctx(task))
    assert found.reason == "nondeterministic" and "differ bit-for-bit" in found.message


def test_a_task_declared_nondeterministic_checks_the_second_launch_instead(task):
    nondet = replace(task, nondeterministic=True)
    run = full_run(nondet, second_launch=stage(nondet, REPEAT, 5, jittered()))
    assert judge(run, ctx(nondet)) is None
    run = full_run(nondet, second_launch=stage(nondet, REPEAT, 5, GOOD * 2))
    found = judge(run, ctx(nondet))
    assert found.reason == "mismatch" and "second launch" in found.message


def test_a_kept_copy_overwritten_by_a_later_launch_is_stale(task):
    run = full_run(task, **{"after_timed_launch_17": stage(task, mid_timing(17), 4, jittered(), later=9)})
    found = judge(run, ctx(task))
    assert found.reason == "stale_after_timing" and "overwritten by a later launch" in found.message
    # a copy bit-for-bit the first launch's may change later: its values were already known good
    run = full_run(task, **{"after_timed_launch_17": stage(task, mid_timing(17), 1, same_as=FIRST, later=9)})
    assert judge(run, ctx(task)) is None


def test_a_kept_copy_of_the_first_launch_changed_later_is_stale(task):
    run = full_run(task, **{"first_launch": stage(task, FIRST, 1, later=2)})
    found = judge(run, ctx(task))
    assert found.reason == "stale_after_timing" and "kept after the first launch" in found.message


def test_a_stage_identical_to_a_later_compared_stage_uses_that_comparison(task):
    nondet = replace(task, nondeterministic=True)
    run = full_run(nondet, second_launch=stage(nondet, REPEAT, 5, stale()),
                   after_timing=stage(nondet, AFTER_TIMING, 5, same_as=REPEAT))
    assert outputs_of(run, run.stage(AFTER_TIMING)) is run.stage(REPEAT).outputs
    assert judge(run, ctx(nondet)).stage == REPEAT


def test_const_inputs_changed_come_first(task):
    run = full_run(task, **{"first_launch": stage(task, FIRST, 1, GOOD * 2)})
    run.input_fingerprints = {"a": 10, "b": 20}
    run.inputs_after = {FIRST: {"a": 10, "b": 20}, REPEAT: {"a": 10, "b": 21}}
    found = judge(run, ctx(task))
    assert found.reason == "input_modified"
    assert found.message == "const input(s) b changed by the kernel (seen after the second launch)"


def test_expected_or_initial_values_changed_during_the_run_are_tampering(task):
    run = full_run(task)
    run.expected_fingerprints = {"c": (5, 6)}
    found = judge(run, ctx(task))
    assert found.reason == "tampered" and "expected values of output c" in found.message
    run.expected_fingerprints = {"c": (5, 5)}
    run.initial_fingerprints = {"bins": (1, 2)}
    assert "initial values of bins" in judge(run, ctx(task)).message
    run.initial_fingerprints = {"bins": (1, 1)}
    assert judge(run, ctx(task)) is None


# -- the sampled re-check of the GPU comparison ------------------------------------------------

def sampled(task, values, summary_values=None, indices=None):
    """A run whose first stage was compared on the GPU (summary from ``summary_values``) and kept,
    and the gate's sample of ``values`` at ``indices``."""
    first = stage(task, FIRST, 1, GOOD if summary_values is None else summary_values, kept=True)
    run = Observation(case="odd", seed=0, stages=[first])
    idx = np.arange(0, N, 97) if indices is None else np.asarray(indices)
    claimed = [int(np.ravel_multi_index(tuple(f["index"]), EXPECTED.shape)) for f in first.outputs[0].first]
    idx = np.unique(np.concatenate([idx, np.asarray(claimed, dtype=np.int64)]))
    c = ctx(task, sample_indices={FIRST: {"c": idx}}, sample=SampleValues({FIRST: {"c": values[idx]}}))
    return run, c


def test_a_sample_that_agrees_with_the_summary_passes(task):
    assert judge(*sampled(task, GOOD)) is None
    wrong = GOOD.copy()
    wrong[[10, 2000]] = 7.0
    found = judge(*sampled(task, wrong, summary_values=wrong))
    assert found.reason == "mismatch"        # the summary was honest: its verdict stands


def test_a_forged_ok_summary_is_caught_by_the_sample(task):
    wrong = GOOD * 2                        # every element wrong, summary says all is well
    found = judge(*sampled(task, wrong))
    assert found.reason == "tampered" and "found no mismatch" in found.message


def test_a_summary_naming_a_mismatch_the_values_do_not_show_is_caught(task):
    claimed = GOOD.copy()
    claimed[123] = 5.0
    run, c = sampled(task, GOOD, summary_values=claimed)   # the kept values are right at 123
    found = judge(run, c)
    assert found.reason == "tampered" and "element 123" in found.message


def test_a_missing_sample_or_missing_values_never_pass(task):
    run, c = sampled(task, GOOD)
    c.sample = None
    assert judge(run, c).reason == "harness_error"
    run, c = sampled(task, GOOD)
    c.sample = SampleValues({FIRST: {}})
    assert judge(run, c).reason == "tampered"


def test_stages_compared_on_the_cpu_need_no_sample(task):
    run = full_run(task)
    assert not any(s.kept for s in run.stages)
    assert checks.check_sample(run, ctx(task)) is None


# -- plausibility -------------------------------------------------------------------------------

def test_faster_than_the_copy_bandwidth_is_implausible(task):
    run = full_run(task)
    run.timing = summarize([10.0] * 10)
    cal = {"bandwidth": 4e12, "tensor_peak": 1e15}
    nbytes = 12 * 16777216
    found = judge(run, ctx(task, calibration=cal, bytes=nbytes, flops=16777216))
    assert found.reason == "implausible" and "GB/s" in found.message
    run.timing = summarize([100.0] * 10)
    assert judge(run, ctx(task, calibration=cal, bytes=nbytes, flops=16777216)) is None
    run.timing = summarize([10.0] * 10)
    assert judge(run, ctx(task, calibration=cal, bytes=nbytes, plausibility=False)) is None


# -- before any launch: module facts -----------------------------------------------------------

DEVICE = {"max_threads_per_block": 1024, "max_block": [1024, 1024, 64], "max_grid": [2**31 - 1, 65535, 65535],
          "max_smem_per_block": 49152, "max_smem_per_block_optin": 232448}


def facts(**kw):
    base = dict(registers=32, static_smem=2048, max_threads_per_block=1024, param_sizes=[8, 8, 8, 4],
                max_dynamic_smem=232448 - 2048)
    base.update(kw)
    return ModuleFacts(**base)


def load_ctx(task, launch=ResolvedLaunch((100, 1, 1), (256, 1, 1), 0), **kw):
    return LoadContext(task, DEVICE, kw.pop("facts", facts()), launch, **kw)


def test_a_launch_within_the_limits_is_allowed(task):
    assert before_launch(load_ctx(task)) is None


@pytest.mark.parametrize("launch, text", [
    (ResolvedLaunch((1, 1, 1), (2048, 1, 1), 0), "2048 threads"),
    (ResolvedLaunch((1, 1, 1), (32, 1, 128), 0), "block dimension z = 128 exceeds 64"),
    (ResolvedLaunch((1, 70000, 1), (32, 1, 1), 0), "grid dimension y = 70000 exceeds 65535"),
    (ResolvedLaunch((0, 1, 1), (32, 1, 1), 0), "need every dimension >= 1"),
    (ResolvedLaunch((1, 1, 1), (32, 1, 1), 300000), "300000 bytes of dynamic"),
])
def test_launches_beyond_the_gpus_limits_are_launch_config(task, launch, text):
    found = before_launch(load_ctx(task, launch))
    assert found.reason == "launch_config" and text in found.message


def test_launches_beyond_the_kernels_own_limits_are_launch_config(task):
    found = before_launch(load_ctx(task, ResolvedLaunch((1, 1, 1), (1024, 1, 1), 0),
                                   facts=facts(max_threads_per_block=512, registers=128)))
    assert found.reason == "launch_config" and "this kernel's limit of 512 (128 registers" in found.message
    found = before_launch(load_ctx(task, ResolvedLaunch((1, 1, 1), (32, 1, 1), 100000),
                                   facts=facts(max_dynamic_smem=49152, smem_error="denied")))
    assert found.reason == "launch_config" and "accepts 49152 (denied)" in found.message


def test_parameter_sizes_differing_from_the_signature_are_signature_mismatch(task):
    found = before_launch(load_ctx(task, facts=facts(param_sizes=[8, 8, 8, 8])))
    assert found.reason == "signature_mismatch" and "[8, 8, 8, 8]" in found.message and "[8, 8, 8, 4]" in found.message
    assert before_launch(load_ctx(task, facts=facts(param_sizes=None))) is None


def test_a_launch_that_did_not_evaluate_is_launch_config(task):
    found = before_launch(load_ctx(task, launch=None, launch_error="unknown variable BLOCK"))
    assert found.reason == "launch_config" and found.message == "launch expression: unknown variable BLOCK"


# -- failures the worker observed --------------------------------------------------------------

@pytest.mark.parametrize("failure, reason", [
    (Failure("cuda", "illegal address", code="CUDA_ERROR_ILLEGAL_ADDRESS", sticky=True), "crash"),
    (Failure("cuda", "too many resources", code="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"), "launch_failed"),
    (Failure("out_of_memory", "OutOfMemoryError", code="CUDA_ERROR_OUT_OF_MEMORY"), "out_of_memory"),
    (Failure("python", "ValueError: x"), "harness_error"),
    (Failure("harness", "KeyError"), "harness_error"),
    (Failure("no_expected", "no expected outputs"), "reference_error"),
])
def test_observed_failures_map_to_reasons(failure, reason):
    found = failure_finding(failure)
    assert found.reason == reason and found.message == failure.message


def test_every_check_gives_known_reasons_and_is_listed_once():
    assert len(set(checks.RUN_CHECKS)) == len(checks.RUN_CHECKS)
    assert len(set(checks.PRE_CHECKS)) == len(checks.PRE_CHECKS)
    import inspect
    src = inspect.getsource(checks)
    import re
    for reason in set(re.findall(r'Finding\("([a-z_]+)"', src)):
        assert reason in REASONS, reason
    named = {n for n, f in vars(checks).items() if n.startswith("check_") and callable(f)}
    assert named == {f.__name__ for f in checks.RUN_CHECKS + checks.PRE_CHECKS}
