"""The real gate with the worker's code (gpu/runner.py) in this process on the NumPy stand-in for CuPy
and the driver (tests/support/fake_gpu.py): a small vector_add task, an in-process Worker, the gate
over it, and Python "kernels" given the launch's argument values. No GPU.

Test files import the fixtures :func:`task` (the vector_add task) and :func:`gate` (the gate over it
with an in-process worker): ``from tests.support.in_process_gate import gate, task``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import kernel_forge.gate.gate as gate_mod
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.gate.worker import WorkerError
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import Task, load_task
from kernel_forge.model.worker_protocol import CALIBRATE, LOAD, RUN, SAMPLE

from tests.support import fake_gpu
from tests.support.paths import ROOT

SOURCE = r'''
// kforge: grid = [cdiv(n, 256)]
// kforge: block = [256]
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
'''


class InProcessWorker:
    """The gate's Worker, with the real CaseRunner in this process instead of a spawned one."""

    instances: list["InProcessWorker"] = []

    def __init__(self, task_path, device=0, start_timeout=120.0, resident_bytes=0):
        from kernel_forge.gpu.runner import CaseRunner

        self.runner = CaseRunner(load_task(task_path), device, resident_bytes)
        self.device, self.pid, self.clock, self.alive = self.runner.info.to_json(), 1, None, True
        self.calls: list[str] = []
        InProcessWorker.instances.append(self)

    def request(self, op, payload, *, on_need=None, **_timeouts):
        from kernel_forge.gpu.failure import CaseFailure

        self.calls.append(op)
        try:
            if op == LOAD:
                return self.runner.load(payload)
            if op == RUN:
                return self.runner.run(payload.spec, payload.plan, need=on_need)
            if op == SAMPLE:
                return self.runner.sample(payload)
            if op == CALIBRATE:
                return self.runner.calibrate()
        except CaseFailure as exc:
            raise WorkerError.of(exc.failure) from None
        except Exception as exc:   # as worker_main does: whatever else, classified
            from kernel_forge.gpu.failure import classify
            raise WorkerError.of(classify(exc, stage=op)) from None
        raise AssertionError(op)

    def close(self, kill=False):
        self.alive = False


def vector_add_task(folder: Path) -> Task:
    """vector_add with two small cases (odd: 1003, perf: 4096), written to ``folder``/va.json."""
    src = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    src["reference"]["python"] = str(ROOT / "references" / "vector_add.py") + ":reference"
    src["baselines"] = {"cupy_add": {"python": str(ROOT / "references" / "vector_add.py") + ":cupy_add"}}
    src.pop("templates", None)
    src["initial"] = str(ROOT / "manifests" / "vector_add.cu")
    src["cases"] = [{"name": "odd", "role": "correctness", "vars": {"n": 1003}},
                    {"name": "perf", "role": "performance", "vars": {"n": 4096}}]
    (folder / "va.json").write_text(json.dumps(src))
    return load_task(folder / "va.json")


def in_process_gate(task: Task, monkeypatch):
    """A fixture body: the gate over ``task`` with :class:`InProcessWorker` on the fake GPU, closed
    at teardown (``yield from in_process_gate(task, monkeypatch)``)."""
    fake_gpu.install(monkeypatch)
    InProcessWorker.instances.clear()
    monkeypatch.setattr(gate_mod, "Worker", InProcessWorker)
    g = Gate(task, GateOptions(arch="sm_90", warmup=2, reps=10))
    yield g
    g.close()


def kernel_fn(f, with_module=False):
    """A vector_add "kernel": ``f(a, b, c, n[, module])`` on the argument buffers."""
    def run(values, module):
        a_ptr, b_ptr, c_ptr, n = values
        args = (fake_gpu.floats(a_ptr, n), fake_gpu.floats(b_ptr, n), fake_gpu.floats(c_ptr, n), n)
        f(*args, module) if with_module else f(*args)
    fake_gpu.KERNEL["run"] = run


def honest(a, b, c, n):
    c[:] = a + b


CAND = parse_candidate(SOURCE, name="k.cu")


@pytest.fixture
def task(tmp_path):
    """The vector_add task in the test's folder."""
    return vector_add_task(tmp_path)


@pytest.fixture
def gate(task, monkeypatch):
    """The gate over ``task`` with an in-process worker on the NumPy stand-in."""
    yield from in_process_gate(task, monkeypatch)
