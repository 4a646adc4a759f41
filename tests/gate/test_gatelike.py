"""Tests of kernel_forge/gate/gatelike.py: the GateLike protocol and InTurn's evaluate_many."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.gate.gatelike import GateLike, InTurn
from kernel_forge.gate.recorded import RecordedGate
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import load_task
from kernel_forge.model.verdict import Evaluation

from tests.support.fakes import ScriptedGate

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"


@pytest.fixture(scope="module")
def task():
    return load_task(MANIFEST)


def test_scripted_and_recorded_gates_are_gatelike(tmp_path, task):
    assert isinstance(ScriptedGate(task), GateLike)
    assert isinstance(RecordedGate({}), GateLike)

    class NoProfile:                                   # the check can fail
        def evaluate(self, candidate, *, roles=(), kind="candidate"): ...
        def retime(self, candidates, rounds=2): ...
        def evaluate_baseline(self, name): ...
        def device_info(self): ...
        def calibrate(self): ...
        def precompile(self, candidates): ...
        def close(self): ...

    assert not isinstance(NoProfile(), GateLike)


class Counting(InTurn):
    """evaluate() records each candidate and the roles it was asked for; passes every kernel."""

    def __init__(self):
        self.seen: list[tuple[str, tuple]] = []

    def evaluate(self, candidate, *, roles=("correctness", "performance"), kind="candidate"):
        self.seen.append((candidate.name, tuple(roles)))
        return Evaluation(label=candidate.name, passed=True)


def kernels(n: int):
    return [parse_candidate(f'extern "C" __global__ void k{i}(float* c) {{ c[0] = {i}; }}', name=f"k{i}.cu")
            for i in range(n)]


def test_in_turn_gates_every_candidate_in_order_with_the_roles_given():
    gate, results = Counting(), []
    out = gate.evaluate_many(kernels(3), roles=("correctness",), on_result=lambda i, ev: results.append((i, ev.label)))
    assert gate.seen == [("k0.cu", ("correctness",)), ("k1.cu", ("correctness",)), ("k2.cu", ("correctness",))]
    assert [ev.label for ev in out] == ["k0.cu", "k1.cu", "k2.cu"]
    assert results == [(0, "k0.cu"), (1, "k1.cu"), (2, "k2.cu")]      # each verdict as it arrives


def test_in_turn_asks_should_stop_before_each_candidate_and_leaves_the_rest_none():
    gate, asked = Counting(), []

    def stop_after_two():
        asked.append(len(gate.seen))
        return len(gate.seen) >= 2

    out = gate.evaluate_many(kernels(4), should_stop=stop_after_two)
    assert [ev.label if ev else None for ev in out] == ["k0.cu", "k1.cu", None, None]
    assert asked == [0, 1, 2]                  # asked before the first, the second and the third; not after
    assert Counting().evaluate_many([]) == []
