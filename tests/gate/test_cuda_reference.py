"""Tests of kernel_forge/gate/cuda_reference.py: a CUDA reference's outputs from its own worker."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from kernel_forge.gate.cuda_reference import reference_run
from kernel_forge.model.task import load_task
from kernel_forge.model.worker_protocol import (FIRST, LOAD, REPEAT, RUN, KernelSpec, Load, Observation, ResolvedLaunch,
                                                Run, StageObservation)

ROOT = Path(__file__).resolve().parents[2]


class RecordingWorker:
    """A reference worker that records its requests and answers a run with the stages given."""

    def __init__(self, stages: list[StageObservation]):
        self.stages = stages
        self.requests: list[tuple[str, object, dict]] = []

    def request(self, op, payload, **timeouts):
        self.requests.append((op, payload, timeouts))
        if op == LOAD:
            return None
        return Observation(case=payload.plan.case, seed=payload.plan.seed, stages=self.stages)


def test_the_reference_is_loaded_then_run_once_on_the_case_and_seed_without_timing_or_checks():
    task = load_task(ROOT / "manifests" / "vector_add.json")
    spec = KernelSpec(kind="cuda", label="reference.cu", cubin=b"cubin", entry="vector_add")
    launch = ResolvedLaunch((4, 1, 1), (256, 1, 1))
    c = np.arange(37, dtype=np.float32)
    worker = RecordingWorker([StageObservation(stage=FIRST, fingerprints={}, arrays={"c": c})])
    out = reference_run(worker, task, spec, task.case("tiny"), 1234, launch, first_timeout=90.0)
    (load_op, load, load_t), (run_op, run, run_t) = worker.requests
    assert (load_op, run_op) == (LOAD, RUN)
    assert isinstance(load, Load) and load.spec is spec and load.launches == [launch]
    assert isinstance(run, Run) and run.spec is spec
    plan = run.plan
    assert (plan.case, plan.seed, plan.launch) == ("tiny", 1234, launch)
    assert (plan.repeat, plan.time, plan.compare, plan.keep) == (False, False, "cpu", False)   # one launch, sent back
    assert load_t == run_t == {"first_timeout": 90.0, "rest_timeout": 60, "what": "running the CUDA reference"}
    assert list(out) == ["c"] and out["c"] is c                  # a float32 output as the worker sent it


def test_bfloat16_outputs_come_back_as_float32_values_and_only_the_first_launch_counts():
    task = load_task(ROOT / "manifests" / "gelu_bf16.json")         # output y: __nv_bfloat16
    bits = np.array([0x3F80, 0xC000, 0x0000, 0x4049], dtype=np.uint16)  # 1.0, -2.0, 0.0, 3.140625
    worker = RecordingWorker([StageObservation(stage=REPEAT, fingerprints={}, arrays={"y": np.zeros(4, np.uint16)}),
                              StageObservation(stage=FIRST, fingerprints={}, arrays={"y": bits})])
    out = reference_run(worker, task, KernelSpec(kind="cuda", label="ref.cu"), task.cases[0], 0,
                        ResolvedLaunch((1, 1, 1), (256, 1, 1)), first_timeout=60)
    assert out["y"].dtype == np.float32
    assert out["y"].tolist() == [1.0, -2.0, 0.0, 3.140625]
