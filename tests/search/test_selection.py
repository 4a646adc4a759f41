"""Choosing the best (kernel_forge/search/selection.py) against the scripted gate."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.search import selection
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.common.errors import KForgeError
from kernel_forge.search.attempt import Attempt
from kernel_forge.model.task import load_task

from fakes import ScriptedGate, vector_add

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def task():
    return load_task(ROOT / "manifests" / "vector_add.json")


class Pool:
    """Attempts with in-memory sources, and the ``candidate`` function selection needs."""

    def __init__(self):
        self.sources: dict[str, str] = {}

    def add(self, aid: str, source: str, score: float, status: str = "passed", best: bool = False) -> Attempt:
        self.sources[aid] = source
        return Attempt(id=aid, iteration=1, proposer="t", status=status, reason=status if status != "passed" else "passed",
                       score_us=score, best=best)

    def candidate(self, a: Attempt):
        return parse_candidate(self.sources[a.id], name=f"{a.id}.cu")


def test_contenders_are_the_faster_passed_attempts_fastest_first():
    pool = Pool()
    best = pool.add("a0000", vector_add(), 600, best=True)
    batch = [pool.add("a0001", vector_add("pass 500"), 500), pool.add("a0002", vector_add("pass 300"), 300),
             pool.add("a0003", vector_add("pass 700"), 700), pool.add("a0004", vector_add("mismatch 100"), 100, "failed"),
             pool.add("a0005", vector_add("pass 400"), 400)]
    assert [a.id for a in selection.contenders(batch, best, 2)] == ["a0002", "a0005"]
    assert [a.id for a in selection.contenders(batch, best, 5)] == ["a0002", "a0005", "a0001"]


def test_a_faster_contender_becomes_best_after_retime_and_holdout(task):
    pool, gate, saves = Pool(), ScriptedGate(task), []
    best = pool.add("a0000", vector_add(), 600, best=True)
    fast = pool.add("a0001", vector_add("pass 400"), 400)
    moved = selection.maybe_move_best(gate, best, [fast], selection.Rules(rounds=3), candidate=pool.candidate,
                                      save=lambda: saves.append(1))
    assert moved is fast and fast.best is True
    assert fast.retimed == {"candidate_us": pytest.approx(400), "best_us": pytest.approx(600), "best_id": "a0000",
                            "noise": pytest.approx(0.01)}
    assert fast.holdout == {"passed": True, "reason": "passed", "message": "", "final": False}
    assert ("retime", ("a0000.cu", "a0001.cu"), 3) in gate.calls
    assert ("evaluate", "a0001.cu", ("holdout",)) in gate.calls
    assert saves == []                        # the loop saves the move itself


def test_within_noise_is_not_a_move(task):
    pool, gate, saves = Pool(), ScriptedGate(task), []
    best = pool.add("a0000", vector_add(), 600, best=True)
    close = pool.add("a0001", vector_add("pass 597"), 597)
    assert selection.maybe_move_best(gate, best, [close], selection.Rules(min_improvement=0.01),
                                     candidate=pool.candidate, save=lambda: saves.append(1)) is None
    assert close.best is False and close.status == "passed"
    assert close.message.startswith("not faster beyond noise: 597.00 vs 600.00")
    assert saves == [1]
    assert not [c for c in gate.calls if c[0] == "evaluate"]      # no holdout for a loser


def test_the_measured_noise_band_can_exceed_min_improvement(task):
    pool, gate = Pool(), ScriptedGate(task, noise=0.1)
    best = pool.add("a0000", vector_add(), 600, best=True)
    gain = pool.add("a0001", vector_add("pass 570"), 570)         # 5 % faster, noise ~6 %
    assert selection.maybe_move_best(gate, best, [gain], selection.Rules(), candidate=pool.candidate) is None
    assert gain.retimed["noise"] > 0.05


def test_a_holdout_failure_falls_back_to_the_next_contender(task):
    pool, gate = Pool(), ScriptedGate(task)
    best = pool.add("a0000", vector_add(), 600, best=True)
    cheat = pool.add("a0001", vector_add("pass 300", holdout="fail"), 300)
    honest = pool.add("a0002", vector_add("pass 400"), 400)
    moved = selection.maybe_move_best(gate, best, [cheat, honest], selection.Rules(), candidate=pool.candidate)
    assert moved is honest
    assert (cheat.status, cheat.reason, cheat.best) == ("failed", "holdout_failed", False)
    assert cheat.message == selection.HIDDEN and "3145745" in cheat.holdout["message"]


def test_only_the_first_contenders_are_retimed(task):
    pool, gate = Pool(), ScriptedGate(task)
    best = pool.add("a0000", vector_add(), 600, best=True)
    batch = [pool.add(f"a000{i}", vector_add(f"pass {300 + i}", holdout="fail"), 300 + i) for i in range(1, 4)]
    assert selection.maybe_move_best(gate, best, batch, selection.Rules(contenders=2), candidate=pool.candidate) is None
    assert [c[1] for c in gate.calls if c[0] == "retime"] == [("a0000.cu", "a0001.cu"), ("a0000.cu", "a0002.cu")]
    assert batch[2].status == "passed" and batch[2].retimed is None


def test_a_contender_that_fails_its_remeasurement_is_failed(task):
    class Flaky(ScriptedGate):
        def retime(self, candidates, rounds=2):
            best_ev, new_ev = super().retime(candidates, rounds)
            new_ev.passed, new_ev.reason, new_ev.message = False, "nondeterministic", "case n16M: differs"
            return [best_ev, new_ev]

    pool = Pool()
    best = pool.add("a0000", vector_add(), 600, best=True)
    c = pool.add("a0001", vector_add("pass 400"), 400)
    assert selection.maybe_move_best(Flaky(task), best, [c], selection.Rules(), candidate=pool.candidate) is None
    assert (c.status, c.reason) == ("failed", "nondeterministic")
    assert c.message == "re-measurement failed: nondeterministic: case n16M: differs"


def test_final_holdout_records_a_check_that_itself_failed(task):
    class Broken(ScriptedGate):
        def evaluate(self, candidate, *, roles=("correctness", "performance"), **kw):
            raise KForgeError("worker lost")

    pool = Pool()
    best = pool.add("a0001", vector_add("pass 400"), 400, best=True)
    selection.final_holdout(Broken(task), best, pool.candidate)
    assert best.holdout == {"passed": False, "reason": "error", "message": "worker lost", "final": True}
    selection.final_holdout(ScriptedGate(task), best, pool.candidate)
    assert best.holdout == {"passed": True, "reason": "passed", "message": "", "final": True}
