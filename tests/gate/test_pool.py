"""Several GPUs through fake gates: parallel gating, a device that dies, comparisons on one device."""
from __future__ import annotations

import threading
import time

import pytest

from kernel_forge.model.candidate import Candidate
from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.gate.pool import GatePool, parse_devices
from kernel_forge.gate.gatelike import GateLike
from kernel_forge.model.verdict import Evaluation


class SlowGate:
    """Passes every candidate after ``seconds``; optionally dies (raises) on its n-th evaluation."""

    def __init__(self, name: str, seconds: float = 0.2, die_at: int | None = None):
        self.name, self.seconds, self.die_at = name, seconds, die_at
        self.evaluated: list[str] = []
        self.retimed: list[tuple[str, ...]] = []
        self.closed = False
        self.busy = threading.Event()
        self.spans: list[tuple[float, float]] = []    # (start, end) of each evaluation, time.monotonic()

    def evaluate(self, candidate, *, roles=("correctness", "performance"), kind="candidate"):
        if self.die_at is not None and len(self.evaluated) + 1 == self.die_at:
            self.evaluated.append(candidate.name)
            raise EnvironmentProblem(f"{self.name}: the GPU fell off the bus")
        self.busy.set()
        start = time.monotonic()
        time.sleep(self.seconds)
        self.spans.append((start, time.monotonic()))
        self.evaluated.append(candidate.name)
        return Evaluation(label=candidate.name, passed=True, score_us=float(len(candidate.name)))

    def retime(self, candidates, rounds=2):
        self.retimed.append(tuple(c.name for c in candidates))
        return [Evaluation(label=c.name, passed=True, score_us=1.0) for c in candidates]

    def evaluate_baseline(self, name):
        return Evaluation(label=f"baseline:{name}", passed=True, kind="baseline")

    def device_info(self):
        return {"name": self.name}

    def calibrate(self):
        return {"bandwidth": 1.0}

    def precompile(self, candidates):
        pass

    def profile(self, candidate, cases):
        return {"available": False, "reason": "fake", "tool": "ncu", "seconds": 0.0, "cases": {}}

    def close(self):
        self.closed = True


def cands(n):
    return [Candidate(source=f"// k{i}\n", name=f"a{i:04d}.cu") for i in range(n)]


def test_a_pool_is_a_gatelike():
    assert isinstance(GatePool([SlowGate("g0")], [0]), GateLike)


def test_candidates_are_gated_in_parallel_and_come_back_in_order():
    gates = [SlowGate("g0", 0.2), SlowGate("g1", 0.2)]
    pool = GatePool(gates, [0, 1])
    out = pool.evaluate_many(cands(6))
    assert [e.label for e in out] == [f"a{i:04d}.cu" for i in range(6)]
    assert all(e.passed for e in out)
    assert {e.device for e in out} == {0, 1}
    assert len(gates[0].evaluated) + len(gates[1].evaluated) == 6
    # two devices at once, not one after another: the gates' evaluations overlap in time (read from
    # the spans, not from the wall time, which a loaded machine stretches)
    overlap = sum(max(0.0, min(e0, e1) - max(s0, s1)) for s0, e0 in gates[0].spans for s1, e1 in gates[1].spans)
    assert overlap > 0.5 * 0.2 * min(len(gates[0].spans), len(gates[1].spans))


def test_a_device_that_dies_takes_only_its_candidate_down():
    gates = [SlowGate("g0", 0.05), SlowGate("g1", 0.05, die_at=2)]
    pool = GatePool(gates, [0, 1])
    out = pool.evaluate_many(cands(8))
    died = [e for e in out if e.reason == "worker_died"]
    assert len(died) == 1 and "GPU 1 failed" in died[0].message and died[0].device == 1
    assert sum(e.passed for e in out) == 7            # the others were all gated, on GPU 0 after the fault
    assert pool.devices_info() and len(pool._alive) == 1
    # the next batch runs on the surviving device only
    again = pool.evaluate_many(cands(3))
    assert all(e.passed and e.device == 0 for e in again)


def test_comparisons_never_mix_devices():
    gates = [SlowGate("g0", 0.0), SlowGate("g1", 0.0)]
    pool = GatePool(gates, [3, 5])
    pool.retime(cands(2))
    pool.evaluate(cands(1)[0], roles=("holdout",))
    pool.evaluate_baseline("cublas")
    assert gates[0].retimed == [("a0000.cu", "a0001.cu")] and gates[1].retimed == []
    assert gates[0].evaluated == ["a0000.cu"] and gates[1].evaluated == []
    assert pool.device_info() == {"name": "g0"}


def test_a_time_limit_leaves_the_rest_unstarted():
    gates = [SlowGate("g0", 0.05), SlowGate("g1", 0.05)]
    pool = GatePool(gates, [0, 1])
    started = []
    out = pool.evaluate_many(cands(10), should_stop=lambda: len(started.append(1) or started) > 4)
    assert 2 <= sum(e is not None for e in out) <= 5
    assert out[-1] is None


def test_close_closes_every_gate():
    gates = [SlowGate("g0"), SlowGate("g1")]
    GatePool(gates, [0, 1]).close()
    assert all(g.closed for g in gates)


@pytest.mark.parametrize("spec,count,want", [
    (None, 1, [0]), ("", 4, [0]), ("all", 3, [0, 1, 2]), ("0,1", 2, [0, 1]), (" 2, 0 ", 4, [2, 0]), ([1], 2, [1]),
])
def test_device_lists(spec, count, want):
    assert parse_devices(spec, count) == want


@pytest.mark.parametrize("spec,count,msg", [
    ("0,0", 2, "twice"), ("2", 2, "no GPU 2"), ("x", 2, "ordinals"), ("-1", 2, "no GPU -1"), (",", 2, "names no GPU"),
])
def test_bad_device_lists_say_what_is_wrong(spec, count, msg):
    with pytest.raises(InputError, match=msg):
        parse_devices(spec, count)


def test_the_ci_gate_spreads_approved_kernels_over_the_gpus(tmp_path):
    """`kforge gate --devices 0,1`: one approved kernel at a time per GPU, each compared with its
    initial kernel on the GPU that gated it; rows come back in the approvals' order."""
    import json

    from tests.support.fakes import ScriptedGate
    from tests.support.task_folders import finished_run, make_task

    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.ci.regression import approve_run, run_regression

    manifest = make_task(tmp_path / "task")
    run = finished_run(tmp_path, manifest)
    ap = tmp_path / "approved.json"
    approve_run(run, ap, tmp_path / "approved", 0.05)
    data = json.loads(ap.read_text())
    data["approved"] = [dict(data["approved"][0], task=f"copy{i}") for i in range(4)]
    ap.write_text(json.dumps(data))
    seen = []

    spans = []          # (start, end, device) of every evaluation

    class Slow(ScriptedGate):
        def evaluate(self, candidate, **kw):
            t = time.perf_counter()
            time.sleep(0.15)
            spans.append((t, time.perf_counter(), self.ordinal))
            return super().evaluate(candidate, **kw)

    def factory(task, options):
        seen.append((options.device, threading.current_thread().name))
        gate = Slow(task)
        gate.ordinal = options.device
        return gate

    rows = run_regression(ap, GateOptions(), gate_factory=factory, devices=[0, 1])
    assert [r["task"] for r in rows] == ["copy0", "copy1", "copy2", "copy3"]
    assert all(r["ok"] for r in rows), [r["detail"] for r in rows]
    assert {r["device"] for r in rows} == {0, 1} and {d for d, _ in seen} == {0, 1}
    assert all(name.endswith(f"gpu{d}") for d, name in seen)   # each gate was built on its GPU's thread
    # two at a time, not one after another: evaluations on the two GPUs overlap in time (a wall-clock
    # bound on the whole would fail on a loaded machine without saying anything about concurrency)
    assert any(a0 < b1 and b0 < a1 for a0, a1, da in spans for b0, b1, db in spans if da != db)
