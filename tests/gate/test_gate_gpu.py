"""GPU tests of the second-generation gate: resident inputs, GPU comparison and its integrity
checks, driver resets, module state, adaptive timing (run on the H200 by the lead)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kernel_forge.model.candidate import load_candidate, parse_candidate
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.model.task import load_task
from kernel_forge.model.worker_protocol import FIRST, Expected, KernelSpec, Load, RunPlan, resolve_launch

from tests.support.paths import ROOT

pytestmark = pytest.mark.gpu

ONCE = r'''
// kforge: grid = [cdiv(n, 256)]
// kforge: block = [256]
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
'''

#: a single-pass sum whose "last block" counter resets itself: legitimate module state
LAST_BLOCK_SUM = r'''
// kforge: grid = [min(cdiv(n, 256), 1024)]
// kforge: block = [256]
__device__ unsigned int g_done = 0;
__device__ float g_partial[1024];
extern "C" __global__ void reduce_sum(const float* x, float* out, int n) {
  __shared__ float s[256];
  float acc = 0.0f;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc += x[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) { if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o]; __syncthreads(); }
  __shared__ bool last;
  if (threadIdx.x == 0) {
    g_partial[blockIdx.x] = s[0];
    __threadfence();
    last = atomicAdd(&g_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    float total = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) total += ((volatile float*)g_partial)[b];
    out[0] = total;
    g_done = 0;
  }
}
'''


def _task(name):
    return load_task(ROOT / "manifests" / f"{name}.json")


def _fast(**kw):
    base = dict(warmup=2, reps=10)
    base.update(kw)
    return GateOptions(**base)


def test_gpu_and_cpu_comparisons_give_the_same_record():
    task = _task("vector_add")
    wrong = parse_candidate(ONCE.replace("a[i] + b[i]", "(i % 7 ? a[i] + b[i] : -a[i])"), name="wrong.cu")
    with Gate(task, GateOptions.quick(warmup=1, reps=5)) as gate:
        gpu = gate.evaluate(wrong, roles=("correctness",))
        gate.options.compare = "cpu"
        cpu = gate.evaluate(wrong, roles=("correctness",))
        good_cpu = gate.evaluate(parse_candidate(ONCE, name="once.cu"), roles=("correctness",))
        gate.options.compare = "gpu"
        good_gpu = gate.evaluate(parse_candidate(ONCE, name="once.cu"), roles=("correctness",))
    assert gpu.reason == cpu.reason == "mismatch"
    assert json.dumps([c.outputs for c in gpu.cases]) == json.dumps([c.outputs for c in cpu.cases])
    assert good_cpu.passed and good_gpu.passed
    assert json.dumps([c.outputs for c in good_gpu.cases]) == json.dumps([c.outputs for c in good_cpu.cases])


def test_a_forged_gpu_comparison_is_caught_by_the_sample(monkeypatch):
    from kernel_forge.gpu.runner import FORGE_ENV

    monkeypatch.setenv(FORGE_ENV, "1")          # the spawned worker inherits it
    task = _task("vector_add")
    wrong = parse_candidate(ONCE.replace("a[i] + b[i]", "a[i] * b[i]"), name="wrong.cu")
    with Gate(task, GateOptions.quick(warmup=1, reps=5)) as gate:
        ev = gate.evaluate(wrong, roles=("correctness",))
    assert ev.reason == "tampered" and "found no mismatch" in ev.message, ev.message


def _runner_run(runner, task, spec, case_name, seed, expected_of):
    case = task.case(case_name)
    launch = resolve_launch(spec.launch, case.vars, spec.defines)
    runner.load(Load(spec, [launch]))
    plan = RunPlan(case=case_name, seed=seed, launch=launch, repeat=True, time=False)
    return runner.run(spec, plan, need=lambda need: Expected(need.case, need.seed, expected_of(case, seed)))


def test_a_changed_expected_copy_is_seen_and_sent_again():
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.gpu.runner import CaseRunner
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.reference_process import run_python_reference

    task = _task("vector_add")
    runner = CaseRunner(task)
    cand = parse_candidate(ONCE, name="once.cu")
    spec = KernelSpec("cuda", "once.cu", compile_source(ONCE, arch=runner.info.arch).cubin, "vector_add",
                      cand.launch, {})
    asked = []

    def expected_of(case, seed):
        asked.append((case.name, seed))
        return run_python_reference(task, generate(task, case, seed))

    obs = _runner_run(runner, task, spec, "tiny", 0, expected_of)
    assert obs.stage(FIRST).outputs[0].ok and all(a == b for a, b in obs.expected_fingerprints.values())
    bufs = runner.resident.get("tiny", 0)
    with runner.stream:
        bits = bufs.expected["c"].view("uint32")   # the values are masked: change bits, not the value
        bits[3] ^= 1                             # (a masked value may be huge: +1.0 can be lost)
        runner.stream.synchronize()
    obs = _runner_run(runner, task, spec, "tiny", 0, expected_of)
    assert obs.resident is False and "expected values" in obs.restored      # found before the run
    assert asked == [("tiny", 0), ("tiny", 0)]
    obs = _runner_run(runner, task, spec, "tiny", 0, expected_of)
    assert obs.resident and asked == [("tiny", 0), ("tiny", 0)]            # resident, not asked again


def test_inputs_stay_resident_across_candidates_and_a_modified_const_input_is_replaced():
    task = _task("transpose")
    scribbler = load_candidate(ROOT / "tests" / "adversarial" / "scribble_const_transpose.cu")
    with Gate(task, _fast()) as gate:
        first = gate.evaluate(load_candidate(task.initial))
        again = gate.evaluate(load_candidate(task.initial))
        bad = gate.evaluate(scribbler)
        after = gate.evaluate(load_candidate(task.initial))
    assert first.passed and again.passed and after.passed, (first.message, after.message)
    assert bad.reason == "input_modified"
    assert again.cost["worker"].get("upload", 0) < first.cost["worker"]["upload"]
    assert again.seconds < first.seconds


def test_poison_memsets_write_the_poison_value_of_every_type():
    import cupy

    from kernel_forge.common.dtypes import BY_NAME, poison_memset, poison_value
    from kernel_forge.gpu.resident import memset

    stream = cupy.cuda.Stream(non_blocking=True)
    for dtype in BY_NAME.values():
        with stream:   # zeroed on the stream the memset follows (a non-blocking stream skips the default one)
            arr = cupy.zeros(1001, dtype=dtype.numpy)
        width, pattern = poison_memset(dtype)
        memset(arr, width, pattern, stream.ptr)
        stream.synchronize()
        want = np.full(1001, poison_value(dtype), dtype=dtype.numpy)
        assert cupy.asnumpy(arr).tobytes() == want.tobytes(), dtype.name


def test_a_self_resetting_last_block_counter_passes_and_its_globals_are_recorded():
    task = _task("reduce_sum")
    with Gate(task, _fast()) as gate:
        ev = gate.evaluate(parse_candidate(LAST_BLOCK_SUM, name="last_block.cu"))
    assert ev.passed, ev.message
    state = ev.cases[0].module_state
    assert state["globals"] == {"g_done": 4, "g_partial": 4096}
    assert any("g_partial" in names for names in state["changed"].values())


def test_slow_kernels_get_fewer_timed_launches_within_the_budget():
    task = _task("matmul_f32")
    with Gate(task, GateOptions.quick(reps=100, warmup=10, timing_budget_s=0.05, min_reps=10)) as gate:
        ev = gate.evaluate(load_candidate(task.initial), roles=("performance",))
    assert ev.passed, ev.message
    for case in ev.cases:
        n = len(case.timing.samples_us)
        per = case.timing.median * 1e-6
        assert 10 <= n <= 100
        if per * 100 > 0.1:                      # a case too slow for 100 launches in the budget
            assert n < 100


def test_resources_are_filled_from_the_module_facts():
    task = _task("matmul_f32")
    with Gate(task, GateOptions.quick(warmup=1, reps=5)) as gate:
        ev = gate.evaluate(load_candidate(task.initial), roles=("correctness",))
    res = ev.cases[0].resources
    assert res["registers"] > 0 and res["threads_per_block"] == 256 and res["blocks_per_sm"] > 0
    assert 0 < res["occupancy"] <= 1 and res["occupancy_limiter"] in ("registers", "shared_memory", "threads", "blocks")
