"""The worker's code (gpu/runner.py, gpu/resident.py, gpu/compare.py) behind the real gate, on the
NumPy stand-in for CuPy and the driver of tests/support/fake_gpu.py (the in-process gate of
tests/support/in_process_gate.py): no GPU.

The "kernels" are Python functions given the launch's argument values; each cheats or breaks in
one way the gate must see through the worker's observations.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernel_forge.model.candidate import parse_candidate
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.model.worker_protocol import LOAD, SAMPLE

from tests.support import fake_gpu
from tests.support.in_process_gate import CAND, InProcessWorker, SOURCE, gate, honest, kernel_fn, task  # gate, task: fixtures



def test_an_honest_kernel_passes_and_inputs_stay_resident(gate):
    kernel_fn(honest)
    ev = gate.evaluate(CAND)
    assert ev.passed, ev.message
    perf = ev.case("perf")
    assert perf.timing.median > 0 and len(perf.timing.samples_us) == 10
    assert perf.resources["blocks_per_sm"] == 8 and perf.resources["threads_per_block"] == 256
    worker = InProcessWorker.instances[0]
    assert len(worker.runner.resident.entries) == 4           # 2 cases x 2 draws
    # odd: 2 draws x (checked + repeat); perf: the same, plus 2-5 warm-up and 10 timed launches
    assert 20 <= len(fake_gpu.LAUNCHES) <= 23
    uploads = []
    real = worker.runner.inputs.upload
    worker.runner.inputs.upload = lambda case, seed: uploads.append(seed) or real(case, seed)
    ev2 = gate.evaluate(CAND)
    assert ev2.passed and uploads == [] and len(worker.runner.resident.entries) == 4
    assert ev2.cost["worker"].get("upload", 0) < 1.0
    assert worker.calls.count(SAMPLE) == 8


def test_a_wrong_kernel_is_a_mismatch_with_the_first_elements(gate):
    kernel_fn(lambda a, b, c, n: c.__setitem__(slice(None), a - b))
    ev = gate.evaluate(CAND)
    assert ev.reason == "mismatch" and "first launch" in ev.message and "first at (" in ev.message
    out = ev.cases[0].outputs[0]
    assert out["mismatches"] > 0 and out["first"] and out["tol_ratio"] > 1


def test_a_kernel_that_writes_nothing_is_unwritten(gate):
    kernel_fn(lambda a, b, c, n: None)
    assert gate.evaluate(CAND).reason == "unwritten"


def test_a_kernel_that_writes_a_const_input_is_input_modified_and_the_copy_is_dropped(gate):
    def scribble(a, b, c, n):
        c[:] = a + b
        a[0] = 42.0
    kernel_fn(scribble)
    ev = gate.evaluate(CAND)
    assert ev.reason == "input_modified" and "const input(s) a changed" in ev.message
    assert not InProcessWorker.instances[0].runner.resident.entries      # uploaded afresh next time
    kernel_fn(honest)
    assert gate.evaluate(CAND).passed


def test_a_kernel_that_overwrites_the_expected_copy_is_tampered(gate):
    runner_box = {}

    def tamper(a, b, c, n):
        c[:] = a - b                                     # wrong ...
        for entry in runner_box["runner"].resident.entries.values():
            if entry.expected is not None and entry.expected["c"].size == n:
                entry.expected["c"].a[:] = a - b         # ... and the expected copy made to agree
    kernel_fn(honest)
    gate.evaluate(CAND)                                  # expected values now resident
    runner_box["runner"] = InProcessWorker.instances[0].runner
    kernel_fn(tamper)
    ev = gate.evaluate(CAND)
    assert ev.reason == "tampered" and "expected values of output c" in ev.message


def test_a_forged_gpu_comparison_is_caught_by_the_parents_sample(gate, monkeypatch):
    from kernel_forge.gpu.runner import FORGE_ENV

    monkeypatch.setenv(FORGE_ENV, "1")
    kernel_fn(lambda a, b, c, n: c.__setitem__(slice(None), a * b))
    ev = gate.evaluate(CAND)
    assert ev.reason == "tampered" and "found no mismatch" in ev.message


def test_a_kernel_that_stops_working_after_two_launches_is_stale_after_timing(gate):
    calls = {"n": 0}

    def counting(a, b, c, n):       # state the gate cannot reset: a Python counter
        calls["n"] += 1
        if calls["n"] % 100 <= 2:
            c[:] = a + b
    kernel_fn(counting)
    ev = gate.evaluate(CAND, roles=("performance",))
    assert ev.reason == "stale_after_timing", ev.message
    assert "after timing" in ev.message and "never written" in ev.message


def test_the_cpu_fallback_compares_in_the_parent(gate):
    gate.options.compare = "cpu"
    kernel_fn(honest)
    assert gate.evaluate(CAND).passed
    kernel_fn(lambda a, b, c, n: c.__setitem__(slice(None), a - b))
    ev = gate.evaluate(CAND)
    assert ev.reason == "mismatch"
    assert SAMPLE not in InProcessWorker.instances[0].calls


def test_gpu_and_cpu_comparisons_agree_on_the_same_wrong_outputs(gate):
    def half(a, b, c, n):
        c[:] = a + b
        c[::7] = -1.0
    kernel_fn(half)
    gpu = gate.evaluate(CAND, roles=("correctness",))
    gate.options.compare = "cpu"
    cpu = gate.evaluate(CAND, roles=("correctness",))
    assert gpu.reason == cpu.reason == "mismatch"
    assert gpu.cases[0].outputs == cpu.cases[0].outputs


def test_the_first_checked_launch_timing_sets_the_number_of_timed_launches(gate):
    kernel_fn(honest)
    gate.options.reps, gate.options.min_reps = 50, 5
    gate.options.max_noise = 0                  # no early stop: the budget alone decides
    gate.options.timing_budget_s = 0.25         # the fake's events say 20 µs: the maximum fits
    ev = gate.evaluate(CAND, roles=("performance",))
    assert len(ev.case("perf").timing.samples_us) == 50
    gate.options.timing_budget_s = 20e-6 * 7    # about 7 launches' worth: the minimum wins over 3
    ev = gate.evaluate(CAND, roles=("performance",))
    assert 5 <= len(ev.case("perf").timing.samples_us) <= 7



def test_timing_stops_after_the_first_batch_when_the_median_is_already_tight(gate):
    kernel_fn(honest)
    gate.options.reps, gate.options.min_reps, gate.options.timing_budget_s = 50, 5, 0.25
    gate.options.max_noise = 0.005              # the fake's events are all 20 µs: no noise at all
    ev = gate.evaluate(CAND, roles=("performance",))
    t = ev.case("perf").timing
    assert len(t.samples_us) == 5 and t.median == pytest.approx(20.0)


def test_noisy_samples_keep_the_timed_launches_going_in_doubling_batches(gate, monkeypatch):
    import cupy                                  # the fake installed by the fixture

    draws = np.random.default_rng(3)
    monkeypatch.setattr(cupy.cuda, "get_elapsed_time", lambda a, b: 0.02 * (1 + 0.2 * draws.random()))
    kernel_fn(honest)
    gate.options.reps, gate.options.min_reps, gate.options.timing_budget_s = 50, 5, 0.25
    gate.options.max_noise = 0.005              # +-10 % noise: never tight enough before the maximum
    ev = gate.evaluate(CAND, roles=("performance",))
    assert len(ev.case("perf").timing.samples_us) == 50
    gate.options.max_noise = 0.5                # a loose bound: met after one of the batches 5, 10, 20, 40
    ev = gate.evaluate(CAND, roles=("performance",))
    assert len(ev.case("perf").timing.samples_us) in (5, 10, 20, 40)

MEMO = SOURCE.replace('extern "C"', "__device__ int g_done;\n__device__ float g_scratch[64];\nextern \"C\"")


def test_module_globals_start_from_their_load_time_image_before_every_launch(gate):
    """A "computed already" flag in a module global would make every later launch skip its work;
    restored before every launch, it never does, and the launches that set it are recorded."""
    def memo(a, b, c, n, module):
        flag = fake_gpu.MEM.resolve(module.globals["g_done"], 4).view(np.int32)
        if flag[0]:
            return                   # "already computed": skips, leaving the poison
        c[:] = a + b
        flag[0] = 1
    kernel_fn(memo, with_module=True)
    cand = parse_candidate(MEMO, name="memo.cu")
    ev = gate.evaluate(cand)
    assert ev.passed, ev.message
    state = ev.case("perf").module_state
    assert set(state["globals"]) == {"g_done", "g_scratch"}
    assert state["changed"]["draw 1, first launch"] == ["g_done"]
    assert state["changed"]["draw 1, timed launches"] == ["g_done"]


def test_no_flush_warms_the_buffers_and_marks_each_timed_launch(gate):
    kernel_fn(honest)
    gate.options.flush_l2 = False
    ev = gate.evaluate(CAND, roles=("performance",))
    assert ev.passed and ev.case("perf").timing.flushed is False
    calls = InProcessWorker.instances[0].runner.flusher().calls
    assert calls.count("warm") >= 10 and calls.count("mark") >= 10 and "flush" not in calls


def test_a_python_baseline_runs_in_the_worker_and_is_checked_like_a_kernel(gate):
    ev = gate.evaluate_baseline("cupy_add", roles=("correctness", "performance"))
    assert ev.passed, ev.message
    assert ev.kind == "baseline" and ev.case("perf").timing is not None
    assert ev.case("odd").resources is None and ev.case("odd").outputs[0]["ok"]
    assert not fake_gpu.LAUNCHES                  # no kernel of ours: the baseline's own calls
    assert SAMPLE in InProcessWorker.instances[0].calls and LOAD not in InProcessWorker.instances[0].calls


def quick(gate) -> Gate:
    gate.options = GateOptions.quick(arch="sm_90", warmup=2, reps=10)
    return gate


def test_under_quick_a_kernel_that_skips_the_timed_launches_is_stale_after_timing(gate):
    """Issue 31: --quick compares what the last timed launch left, as the full gate does; a kernel
    that remembers it has seen these inputs (a key kept where no restore reaches: here a Python
    set, on the GPU the device heap) and skips the work from then on leaves the poison there."""
    seen: set = set()

    def keyed(a, b, c, n):
        key = (n, float(a[0]), float(b[-1]))
        if key not in seen:
            c[:] = a + b
            seen.add(key)
    kernel_fn(keyed)
    ev = quick(gate).evaluate(CAND, roles=("performance",))
    assert ev.reason == "stale_after_timing", ev.message
    assert "after timing" in ev.message and "never written" in ev.message


def test_under_quick_a_kernel_wrong_only_in_its_timed_launches_is_refused_even_with_written_outputs(gate):
    calls = {"n": 0}

    def drifting(a, b, c, n):     # right on the checked launch, then every element written but off
        calls["n"] += 1
        c[:] = a + b if calls["n"] == 1 else a + b + 1.0
    kernel_fn(drifting)
    ev = quick(gate).evaluate(CAND, roles=("performance",))
    assert ev.reason == "stale_after_timing" and "after timing" in ev.message, ev.message


def test_under_quick_an_honest_kernel_pays_one_fingerprint_and_no_extra_comparison(gate, monkeypatch):
    import kernel_forge.gpu.compare as compare_mod
    from kernel_forge.model.worker_protocol import AFTER_TIMING, FIRST

    compared = []
    real = compare_mod.compare_on_gpu
    monkeypatch.setattr(compare_mod, "compare_on_gpu", lambda *a, **k: compared.append(a[0]) or real(*a, **k))
    kernel_fn(honest)
    worker_obs = []
    ev = quick(gate).evaluate(CAND, roles=("performance",))
    assert ev.passed, ev.message
    runner = InProcessWorker.instances[0].runner
    real_run = runner._run
    runner._run = lambda *a: worker_obs.append(real_run(*a)) or worker_obs[-1]
    compared.clear()
    assert gate.evaluate(CAND, roles=("performance",)).passed
    (obs,) = worker_obs
    assert [s.stage for s in obs.stages] == [FIRST, AFTER_TIMING]
    assert obs.stage(AFTER_TIMING).same_as == FIRST and compared == ["c"]    # the first launch's comparison only


def test_under_quick_a_nondeterministic_but_right_last_launch_is_compared_and_passes(gate, monkeypatch):
    import kernel_forge.gpu.compare as compare_mod

    compared = []
    real = compare_mod.compare_on_gpu
    monkeypatch.setattr(compare_mod, "compare_on_gpu", lambda *a, **k: compared.append(a[0]) or real(*a, **k))
    calls = {"n": 0}

    def jitter(a, b, c, n):       # other bits after the first launch, within the tolerance
        calls["n"] += 1
        c[:] = (a + b) * np.float32(1.0 if calls["n"] == 1 else 1 + 5e-7)
    kernel_fn(jitter)
    ev = quick(gate).evaluate(CAND, roles=("performance",))
    assert ev.passed, ev.message
    assert compared == ["c", "c"]                    # the first launch, and the last timed one


@pytest.mark.parametrize("mode", ["full", "quick"])
def test_a_cache_kept_in_the_unused_room_of_its_block_is_tampered(gate, mode):
    """Issue 31, memory reached by address arithmetic: the case's block is whole 2 MiB pages, so
    past its buffers lies room that nothing restores between launches.  A kernel that keeps its
    answer there, keyed on its inputs, and serves it (correct outputs, and on a GPU a copy is
    cheaper than the work) is refused: the room is zeroed at upload and fingerprinted after every run."""
    from kernel_forge.gpu.resident import PAGE

    def stash(a, b, c, n):
        room = fake_gpu.MEM.resolve(c.ctypes.data + 8 * n, 4 * (n + 3)).view(np.float32)   # past the expected values
        key = np.array([n, a[0], b[-1]], dtype=np.float32)
        if np.array_equal(room[:3], key):
            c[:] = room[3:]                       # served: right, and no arithmetic
        else:
            c[:] = a + b
            room[:3], room[3:] = key, c
    kernel_fn(stash)
    assert 8 * 4096 + 4 * (4096 + 3) + 3 * 4 * 4096 < PAGE        # the perf case's block has room for it
    g = quick(gate) if mode == "quick" else gate
    ev = g.evaluate(CAND, roles=("performance",))
    assert ev.reason == "tampered" and "unused bytes of the case's memory block" in ev.message, ev.message
    kernel_fn(honest)
    assert g.evaluate(CAND, roles=("performance",)).passed       # the block is drawn afresh: clean again


def test_an_honest_kernel_leaves_the_unused_room_of_its_block_as_it_was_zeroed(gate):
    kernel_fn(honest)
    assert gate.evaluate(CAND).passed
    runner = InProcessWorker.instances[0].runner
    for bufs in runner.resident.entries.values():
        assert bufs.free and all(not np.asarray(room.a).any() for room in bufs.free.values())
        covered = sum(int(room.nbytes) for room in bufs.free.values()) + sum(s.nbytes for s in bufs.slots.values())
        assert covered == bufs.block.size
