"""The third-generation gate's guarantees, on the NumPy stand-in for CuPy and the driver
(tests/support/fake_gpu.py), with the real gate and worker code: no GPU.

- invariant 11: after a run, no device memory the worker holds contains a correct answer in
  plain form (the fake's memory is scanned for it), and with the test hook that turns masking off
  the same scan does find one (so the scan can fail);
- harness faults are ``harness_error``, never the candidate's; a sticky error seen at a harness
  call is the candidate's crash;
- more than MEMCPY_MAX globals are restored by the ``kf_state_copy`` kernel; a rewritten image
  or a written ``__constant__`` is ``tampered``;
- --quick poisons outputs before every timed launch;
- a cooperative launch goes through cuLaunchCooperativeKernel, and a grid that cannot be
  co-resident is refused before any launch, with the numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernel_forge.model.candidate import parse_candidate
from kernel_forge.common.errors import CudaError
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gpu import mask as mask_mod
from kernel_forge.gpu.failure import classify

from tests.support import fake_gpu
from tests.support.in_process_gate import CAND, InProcessWorker, SOURCE, gate, honest, kernel_fn, task  # gate, task: fixtures



def _answers(gate_, seeds) -> list[bytes]:
    """The exact bytes of c = a + b of every (case, seed) the runner holds."""
    runner = InProcessWorker.instances[0].runner
    out = []
    for (case, seed), bufs in runner.resident.entries.items():
        if seed in seeds:
            a, b = bufs.const["a"].a, bufs.const["b"].a
            out.append((a + b).astype(np.float32).tobytes())
    return out


def _found_anywhere(needle: bytes) -> bool:
    """Whether ``needle`` (a whole correct output) sits anywhere in the fake device memory."""
    probe = needle[:64]
    for base in fake_gpu.MEM.bases:
        raw = base.tobytes()
        at = raw.find(probe)
        while at >= 0:
            if raw[at:at + len(needle)] == needle:
                return True
            at = raw.find(probe, at + 1)
    return False


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_after_a_run_no_correct_answer_is_left_in_device_memory(gate, quick):
    if quick:
        gate.options = GateOptions.quick(arch="sm_90", warmup=2, reps=10)
    kernel_fn(honest)
    fake_gpu.MEM.bases.clear()                 # only what this evaluation allocates is scanned
    ev = gate.evaluate(CAND)
    assert ev.passed, ev.message
    answers = _answers(gate, set(gate.options.fresh_seeds) | {gate.options.seed})
    assert answers
    assert not any(_found_anywhere(x) for x in answers)


def test_the_scan_finds_the_answer_when_masking_is_off(gate, monkeypatch):
    monkeypatch.setenv(mask_mod.NO_MASK_ENV, "1")
    kernel_fn(honest)
    fake_gpu.MEM.bases.clear()
    assert gate.evaluate(CAND).passed
    answers = _answers(gate, {gate.options.seed})
    assert any(_found_anywhere(x) for x in answers)       # the scan works: masking is what hides it


def test_expected_values_are_stored_masked_and_compared_unmasked(gate):
    kernel_fn(honest)
    assert gate.evaluate(CAND).passed
    runner = InProcessWorker.instances[0].runner
    for bufs in runner.resident.entries.values():
        if bufs.expected is None:
            continue
        stored = bufs.expected["c"].a
        truth = bufs.const["a"].a + bufs.const["b"].a
        assert bufs.mask_key is not None and not np.array_equal(stored, truth)
        assert np.array_equal(mask_mod.host_mask(stored, bufs.mask_key), truth)
    kernel_fn(lambda a, b, c, n: c.__setitem__(slice(None), a - b))
    ev = gate.evaluate(CAND)                    # a wrong kernel still fails against masked values
    assert ev.reason == "mismatch" and ev.cases[0].outputs[0]["first"][0]["expected"] != 0


def test_kept_copies_are_masked_and_the_sample_sees_the_true_values(gate):
    kernel_fn(honest)
    assert gate.evaluate(CAND).passed           # the parent's sample check passed: unmasked right
    assert "kf_mask_u32" in fake_gpu.KF_LAUNCHES


def test_a_python_baselines_pooled_temporaries_are_zeroed(gate):
    ev = gate.evaluate_baseline("cupy_add", roles=("correctness", "performance"))
    assert ev.passed, ev.message
    runner = InProcessWorker.instances[0].runner
    pool = runner._scrubbed
    assert pool is not None and pool.pool.freed >= 1      # scrubbed and released after each run
    assert fake_gpu.TEMPORARIES                           # the baseline's a + b went through its pool ...
    for ptr in fake_gpu.TEMPORARIES:                      # ... and every one of them was zeroed
        assert not fake_gpu.MEM.resolve(ptr, 4 * 1003).any()


# -- harness faults -----------------------------------------------------------------------------

def test_a_failing_module_global_snapshot_is_a_harness_error_not_the_kernels(gate, monkeypatch):
    import kernel_forge.gpu.driver as real_driver

    drv = real_driver._driver()
    monkeypatch.setattr(drv, "cuMemcpyDtoD", lambda dst, src, n: (1,))    # CUDA_ERROR_INVALID_VALUE
    monkeypatch.setattr(real_driver, "error_name", lambda status: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"))
    kernel_fn(honest)
    cand = parse_candidate(SOURCE.replace('extern "C"', '__device__ double g_partial[64];\n'
                                                      '__device__ unsigned int g_count;\nextern "C"'), name="dbl.cu")
    ev = gate.evaluate(cand)
    assert ev.reason == "harness_error", (ev.reason, ev.message)
    assert "module global snapshot" in ev.message and "not the kernel's fault" in ev.message


def test_a_harness_error_is_never_shown_to_a_model_as_the_kernels_failure():
    from types import SimpleNamespace

    from kernel_forge.search.feedback import choose_shown

    def att(i, status, reason):
        return SimpleNamespace(id=f"a{i}", status=status, reason=reason, score_us=None, source=f"k{i}")
    best = SimpleNamespace(id="a0", status="passed", reason="passed", score_us=5.0, source="k0")
    attempts = [best, att(1, "failed", "harness_error"), att(2, "failed", "mismatch"),
                att(3, "failed", "reference_error")]
    shown = choose_shown(attempts, best, None, iteration=1, body=lambda a: a.source, size=lambda a: 10,
                         history_in_prompt=3, history_chars=1000, failures_in_prompt=5, crossover_every=0)
    assert [a.id for a in shown.failures] == ["a2"]


# -- module state: the kernel path, the image, constants -------------------------------------------

MANY = SOURCE.replace('extern "C"', "".join(f"__device__ int g_{i};\n" for i in range(6))
                      + "__device__ int g_done;\nextern \"C\"")


def test_more_than_a_few_globals_are_restored_by_one_kernel(gate):
    def memo(a, b, c, n, module):
        flag = fake_gpu.MEM.resolve(module.globals["g_done"], 4).view(np.int32)
        if flag[0]:
            return                     # "already computed": would leave the poison
        c[:] = a + b
        flag[0] = 1
    kernel_fn(memo, with_module=True)
    ev = gate.evaluate(parse_candidate(MANY, name="many.cu"))
    assert ev.passed, ev.message
    assert fake_gpu.KF_LAUNCHES.count("kf_state_copy") >= 10       # a restore before every launch
    state = ev.case("perf").module_state
    assert len(state["globals"]) == 7 and state["changed"]["draw 1, first launch"] == ["g_done"]


def test_a_candidate_that_rewrites_the_restore_image_is_tampered(gate):
    runner_box = {}

    def smuggle(a, b, c, n, module):
        c[:] = a + b
        st = next(iter(runner_box["runner"].modules.values())).state
        st._buffer.a[:] = 7            # the image every restore copies from
    kernel_fn(honest)
    gate.evaluate(parse_candidate(MANY, name="many.cu"))
    runner_box["runner"] = InProcessWorker.instances[0].runner
    kernel_fn(smuggle, with_module=True)
    ev = gate.evaluate(parse_candidate(MANY, name="many.cu"))
    assert ev.reason == "tampered" and "initial globals" in ev.message


def test_a_write_to_constant_memory_is_tampered(gate):
    src = SOURCE.replace('extern "C"', "__constant__ float c_table[4] = {1, 2, 3, 4};\nextern \"C\"")

    def scribble(a, b, c, n, module):
        c[:] = a + b
        fake_gpu.MEM.resolve(module.globals["c_table"], 4).view(np.float32)[0] = 9.0
    kernel_fn(scribble, with_module=True)
    ev = gate.evaluate(parse_candidate(src, name="const.cu"))
    assert ev.reason == "tampered" and "__constant__ variable(s) c_table" in ev.message


# -- --quick poisons before every timed launch ------------------------------------------------------

def test_quick_poisons_the_outputs_before_every_timed_launch(gate):
    from kernel_forge.common.dtypes import poison_memset

    seen = []

    def skip_if_done(a, b, c, n):
        width, pattern = poison_memset(fake_gpu_dtype())
        seen.append(bool(np.all(c.view(np.uint32) == np.uint32(pattern))))
        c[:] = a + b
    gate.options = GateOptions.quick(arch="sm_90", warmup=2, reps=10)
    kernel_fn(skip_if_done)
    ev = gate.evaluate(CAND, roles=("performance",))
    assert ev.passed, ev.message
    assert len(seen) >= 10 and all(seen), seen


def fake_gpu_dtype():
    from kernel_forge.common.dtypes import BY_NAME
    return BY_NAME["float32"]


# -- cooperative launches -------------------------------------------------------------------------

COOP = SOURCE.replace("// kforge: grid = [cdiv(n, 256)]", "// kforge: grid = [GRID]\n// kforge: cooperative = true")


def test_a_cooperative_kernel_is_launched_cooperatively(gate):
    kernel_fn(honest)
    ev = gate.evaluate(parse_candidate(COOP.replace("GRID", "64"), name="coop.cu"))
    assert ev.passed, ev.message
    assert fake_gpu.COOPERATIVE and all(fake_gpu.COOPERATIVE)
    assert ev.cases[0].launch["cooperative"] is True


def test_a_cooperative_grid_that_cannot_be_resident_is_refused_with_the_numbers(gate):
    kernel_fn(honest)
    # the fake reports 2048 // 256 = 8 blocks per SM on 132 SMs: 1,056 can be resident
    ev = gate.evaluate(parse_candidate(COOP.replace("GRID", "2000"), name="coop.cu"))
    assert ev.reason == "launch_config"
    assert "2000 blocks" in ev.message and "8 blocks per SM x 132 SMs = 1056" in ev.message
    assert not fake_gpu.LAUNCHES


def test_cooperative_needs_the_kernels_own_launch_header():
    from kernel_forge.common.errors import CandidateError

    with pytest.raises(CandidateError, match="cooperative = true needs"):
        parse_candidate("// kforge: cooperative = true\n" + SOURCE.split("\n", 3)[3], name="x.cu")
    with pytest.raises(CandidateError, match="true or false"):
        parse_candidate(COOP.replace("GRID", "8").replace("= true", "= yes"), name="x.cu")
    cand = parse_candidate(COOP.replace("GRID", "8"), name="x.cu")
    again = parse_candidate(cand.render(), name="x.cu")
    assert again.launch.cooperative and again.launch == cand.launch


def test_a_harness_call_raises_a_harness_fault_except_for_sticky_errors_and_oom(monkeypatch):
    import kernel_forge.gpu.driver as real_driver
    from kernel_forge.gpu.module_state import HarnessFault, harness_call

    names = {1: "CUDA_ERROR_INVALID_VALUE", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 2: "CUDA_ERROR_OUT_OF_MEMORY"}
    monkeypatch.setattr(real_driver, "_driver", lambda: __import__("types").SimpleNamespace(
        CUresult=__import__("types").SimpleNamespace(CUDA_SUCCESS=0)))
    monkeypatch.setattr(real_driver, "error_name", lambda status: (names[status], ""))
    with pytest.raises(HarnessFault, match="a copy of mine"):
        harness_call((1,), "a copy of mine")
    for status, kind in ((700, "cuda"), (2, "out_of_memory")):
        with pytest.raises(CudaError) as info:
            harness_call((status,), "a copy of mine")
        assert classify(info.value).kind == kind
    assert harness_call((0, 42), "fine") == 42
