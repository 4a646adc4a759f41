"""The gate's side of the worker protocol, against a scripted worker (no GPU).

The fake worker below answers Load/Run/Sample like the real one, computing the kernel's outputs
with NumPy and comparing them with kernel_forge.model.tolerance (the specification the GPU comparison is
tested against), so the gate's flow is exercised for real: the facts checked before any launch,
the expected outputs sent once per (case, seed), the sample drawn after each run, the verdicts.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import kernel_forge.gate.gate as gate_mod
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.gate.worker import WorkerError
from kernel_forge.model.inputs import generate
from kernel_forge.common.stats import summarize
from kernel_forge.model.task import load_task
from kernel_forge.model.tolerance import compare
from kernel_forge.model.worker_protocol import AFTER_TIMING, CALIBRATE, FIRST, LOAD, REPEAT, RUN, SAMPLE, Failure, ModuleFacts, Need, Observation, SampleValues, StageObservation, mid_timing

from tests.support.paths import ROOT

KERNEL = r'''
// kforge: grid = [cdiv(n, BLOCK)]
// kforge: block = [BLOCK]
// kforge: tune BLOCK = [128, 256]
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
'''

DEVICE = {"name": "Fake H200", "arch": "sm_90", "max_threads_per_block": 1024, "max_block": [1024, 1024, 64],
          "max_grid": [2**31 - 1, 65535, 65535], "max_smem_per_block": 49152, "max_smem_per_block_optin": 232448,
          "fp32_peak": 6e13, "tensor_peak": 9.9e14, "theoretical_bandwidth": 4.8e12, "l2_bytes": 50 << 20}
SM = {"max_threads": 2048, "max_blocks": 32, "registers": 65536, "shared_memory": 233472, "reserved_smem": 1024}


class FakeWorker:
    """Answers the protocol as gpu/runner.py does; ``behaviour`` scripts the kernel."""

    instances: list["FakeWorker"] = []
    behaviour: dict = {}

    def __init__(self, task_path, device=0, start_timeout=120.0, resident_bytes=0):
        self.task = load_task(task_path)
        self.device, self.pid, self.clock, self.resident_bytes = dict(DEVICE), 4242, "cupti", 1 << 30
        self.expected: dict = {}
        self.kept: dict = {}
        self.calls: list[str] = []
        self.needs: list[tuple[str, int]] = []
        self.alive = True
        self.closed = False
        FakeWorker.instances.append(self)

    def close(self, kill=False):
        self.closed, self.alive = True, False

    def request(self, op, payload, *, on_need=None, **_timeouts):
        self.calls.append(op)
        b = FakeWorker.behaviour
        if op == CALIBRATE:
            return {"bandwidth": 4e12, "copy_bytes": 1 << 30, "copy_us": 500.0}
        if op == LOAD:
            threads = {l.threads for l in payload.launches}
            return ModuleFacts(registers=16, static_smem=0, max_threads_per_block=b.get("max_threads", 1024),
                               param_sizes=b.get("param_sizes", [8, 8, 8, 4]), max_dynamic_smem=48 << 10,
                               occupancy={(t, 0): 2048 // t for t in threads}, globals={"g_scratch": 64},
                               sm=dict(SM))
        if op == SAMPLE:
            source = self.kept
            if b.get("forge_sample"):     # answer with the expected values instead of the kept ones
                source = {s: {"c": self.expected[self.last]["c"].astype(np.float32)} for s in self.kept}
            out = {s: {n: source[s][n].reshape(-1)[i] for n, i in names.items()}
                   for s, names in payload.indices.items()}
            self.kept.clear()
            return SampleValues(out)
        assert op == RUN
        if b.get("fail"):
            raise WorkerError.of(b["fail"])
        plan = payload.plan
        task = self.task
        case = task.case(plan.case)
        inputs = generate(task, case, plan.seed)
        c = (inputs.buffers["a"] + inputs.buffers["b"]) * np.float32(b.get("scale", 1.0))
        key = self.last = (plan.case, plan.seed)
        if key not in self.expected:
            self.needs.append(key)
            self.expected[key] = on_need(Need(*key)).outputs
            if self.expected[key] is None:
                raise WorkerError.of(Failure("no_expected", "no expected outputs were sent"))
        exp = self.expected[key]["c"]
        check = compare("c", c, exp, task.arg("c").param.dtype, task.tolerance)
        if b.get("forge"):
            check = compare("c", exp.astype(np.float32), exp, task.arg("c").param.dtype, task.tolerance)
        first = StageObservation(FIRST, {"c": hash(c.tobytes())}, outputs=[check], kept=True)
        obs = Observation(case=plan.case, seed=plan.seed, stages=[first], first_launch_s=1e-5,
                          input_fingerprints={"a": 1, "b": 2}, inputs_after={FIRST: {"a": 1, "b": 2}},
                          expected_fingerprints={"c": (7, 7)}, globals_changed={FIRST: ["g_scratch"]},
                          seconds={"launches": 0.001})
        self.kept[FIRST] = {"c": c}
        if plan.repeat:
            obs.stages.append(StageObservation(REPEAT, dict(first.fingerprints), same_as=FIRST))
        if plan.time:
            obs.timing = summarize([20.0 + 0.01 * i for i in range(plan.timing.reps)])
            obs.reps, obs.warmup = plan.timing.reps, plan.timing.warmup
            obs.stages.append(StageObservation(AFTER_TIMING, dict(first.fingerprints), same_as=FIRST))  # every mode
            if plan.after_timing:
                obs.stages.append(StageObservation(mid_timing(3), dict(first.fingerprints), same_as=FIRST,
                                                   later_fingerprints=dict(first.fingerprints)))
        return obs


@pytest.fixture
def task(tmp_path):
    src = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    src["reference"]["python"] = str(ROOT / "references" / "vector_add.py") + ":reference"
    src["baselines"] = {}
    src.pop("templates", None)
    src["initial"] = str(ROOT / "manifests" / "vector_add.cu")
    src["cases"] = [{"name": "odd", "role": "correctness", "vars": {"n": 1003}},
                    {"name": "perf", "role": "performance", "vars": {"n": 4096}},
                    {"name": "hidden", "role": "holdout", "vars": {"n": 333}}]
    (tmp_path / "va.json").write_text(json.dumps(src))
    return load_task(tmp_path / "va.json")


@pytest.fixture
def gate(task, monkeypatch):
    FakeWorker.instances.clear()
    FakeWorker.behaviour = {}
    monkeypatch.setattr(gate_mod, "Worker", FakeWorker)
    g = Gate(task, GateOptions(arch="sm_90", warmup=2, reps=10))
    yield g
    g.close()


def kernel(block=256):
    return parse_candidate(KERNEL, name="k.cu").with_defines({"BLOCK": block})


def test_an_honest_kernel_passes_with_resources_and_costs(gate):
    ev = gate.evaluate(kernel())
    assert ev.passed, ev.message
    perf = ev.case("perf")
    assert perf.timing.median > 0 and perf.gbps > 0
    assert perf.resources["threads_per_block"] == 256 and perf.resources["blocks_per_sm"] == 8
    assert perf.resources["occupancy"] == 1.0 and perf.resources["registers"] == 16
    assert perf.module_state == {"globals": {"g_scratch": 64},
                                 "changed": {"draw 1, first launch": ["g_scratch"], "draw 2, first launch": ["g_scratch"]}}
    assert perf.outputs[0]["ok"] and "tol_ratio" in perf.outputs[0]
    assert ev.cost["runs"] == 4 and ev.cost["compile_s"] >= 0 and "sample_s" in ev.cost
    w = FakeWorker.instances[0]
    assert w.calls.count(LOAD) == 1 and w.calls.count(RUN) == 4 and w.calls.count(SAMPLE) == 4


def test_expected_outputs_are_sent_once_per_case_and_seed(gate):
    gate.evaluate(kernel(256))
    gate.evaluate(kernel(128))
    w = FakeWorker.instances[0]
    assert len(w.needs) == 4 and len(set(w.needs)) == 4       # 2 cases x 2 seeds, for both candidates
    assert w.calls.count(RUN) == 8


def test_a_forged_comparison_is_caught_by_the_sample(gate):
    FakeWorker.behaviour = {"scale": 2.0, "forge": True}
    ev = gate.evaluate(kernel())
    assert not ev.passed and ev.reason == "tampered", ev.message
    FakeWorker.behaviour = {"scale": 2.0}
    ev = gate.evaluate(kernel())
    assert ev.reason == "mismatch" and "draw 1" in ev.message


def test_sample_values_that_contradict_the_summary_never_pass(gate):
    # the summary names mismatches, the sampled values at those very elements are right
    FakeWorker.behaviour = {"scale": 2.0, "forge_sample": True}
    ev = gate.evaluate(kernel())
    assert not ev.passed and ev.reason == "tampered" and "reported element" in ev.message
    # a forged summary with a forged sample is beyond the sample: the expected copy's fingerprint
    # and the stage fingerprints are what the worker cannot forge (tests/gate/test_gate_gpu.py)


def test_launch_limits_are_checked_from_the_module_facts_before_any_launch(gate):
    FakeWorker.behaviour = {"max_threads": 128}
    ev = gate.evaluate(kernel(256))
    assert ev.reason == "launch_config" and "this kernel's limit of 128" in ev.message
    assert FakeWorker.instances[0].calls == [LOAD]


def test_parameter_sizes_are_checked_from_the_module_facts(gate):
    FakeWorker.behaviour = {"param_sizes": [8, 8, 8, 8]}
    ev = gate.evaluate(kernel())
    assert ev.reason == "signature_mismatch" and RUN not in FakeWorker.instances[0].calls


def test_an_observed_crash_is_a_crash_and_the_worker_is_replaced(gate):
    FakeWorker.behaviour = {"fail": Failure("cuda", "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS",
                                            code="CUDA_ERROR_ILLEGAL_ADDRESS", sticky=True)}
    ev = gate.evaluate(kernel())
    assert ev.reason == "crash" and ev.cases[0].code == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert FakeWorker.instances[0].closed and gate.restarts >= 1


def test_a_reference_that_fails_while_the_worker_waits_is_a_reference_error(gate, monkeypatch):
    import kernel_forge.common.errors as errors

    def broken(task, case, seed):
        raise errors.ReferenceError_("reference exploded")

    monkeypatch.setattr(gate_mod, "reference_outputs", broken)
    ev = gate.evaluate(kernel())
    assert ev.reason == "reference_error" and "reference exploded" in ev.message


def test_precompile_overlaps_and_evaluate_takes_its_result(gate, monkeypatch):
    import kernel_forge.gpu.nvrtc as nvrtc

    compiled = []
    real = nvrtc.compile_source
    monkeypatch.setattr(nvrtc, "compile_source", lambda *a, **k: compiled.append(k.get("defines")) or real(*a, **k))
    batch = [kernel(128), kernel(256)]
    gate.precompile(batch)
    for c in batch:
        assert gate.evaluate(c).passed
    assert sorted(d["BLOCK"] for d in compiled) == [128, 256]   # each compiled once, ahead of its gating
    assert not gate._compiles


def test_quick_and_holdout_draws(gate):
    gate.options = GateOptions.quick(arch="sm_90", warmup=2, reps=10)
    ev = gate.evaluate(kernel(), roles=("correctness", "performance", "holdout"))
    assert ev.passed and [len(c.seeds) for c in ev.cases] == [1, 1, 1]
    assert ev.case("hidden").seeds[0] != 0
    assert FakeWorker.instances[0].calls.count(RUN) == 3
