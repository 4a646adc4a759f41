"""kernel_forge.search.gating: an iteration's pending attempts gated (every verdict recorded, the time limit
checked before each), then the rest of each tuned proposal's settings budget spent in rounds (greedy:
one step of neighbours), then a dispatch rule fitted over its settings.  vector_add with the scripted
gate (tests/fakes.py), whose ``// fake-opt`` lines give each setting its time."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.history_log import read_history
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.task import load_task
from kernel_forge.proposers.base import Proposal
from kernel_forge.search.gating import gate_batch
from kernel_forge.search.loop import Optimizer
from kernel_forge.search.recording import record_proposal
from kernel_forge.search.slots import Slot

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"
TUNED = ("// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n"
         "// kforge: tune BLOCK = [32, 64, 128, 256, 512, 1024]\n// fake-opt: BLOCK=256")


def new_run(tmp_path, **loop) -> Optimizer:
    task = load_task(MANIFEST)
    return Optimizer(task, ScriptedGate(task), ScriptedProposer([]), RunDir.create(tmp_path), LoopConfig(archive="off",
                                                                                                        **loop))


def propose(run, source, label=""):
    return record_proposal(run, Proposal(source=source, proposer="m", label=label), Slot())


def gated(run):
    return [(c[1], c[2]) for c in run.gate.calls if c[0] == "evaluate"]


def test_the_pending_attempts_are_gated_their_verdicts_recorded_and_saved_and_a_failed_one_left_alone(tmp_path):
    run = new_run(tmp_path, refine=False, dispatch=False)
    batch = propose(run, vector_add("pass 300")) + propose(run, vector_add("mismatch 100"))
    conflict = propose(run, vector_add("pass 200", header=TUNED), label="c")[0]
    conflict.status, conflict.reason = "failed", "launch_conflict"       # as recording leaves a conflict
    batch.append(conflict)
    gate_batch(run, batch)
    assert [(a.status, a.reason) for a in batch[:2]] == [("passed", "passed"), ("failed", "mismatch")]
    assert batch[0].score_us == pytest.approx(300.0) and conflict.evaluation is None
    assert [name for name, _ in gated(run)] == ["a0000.cu", "a0001.cu"]
    assert [a["status"] for a in read_history(run.run_dir)["attempts"]][:2] == ["passed", "failed"]


def test_past_the_time_limit_nothing_more_is_gated_and_what_is_left_stays_pending(tmp_path):
    run = new_run(tmp_path, time_limit_s=1e-9)
    batch = propose(run, vector_add("pass 300"))
    gate_batch(run, batch)
    assert batch[0].status == "pending" and gated(run) == []
    assert read_history(run.run_dir)["attempts"][0]["status"] == "pending"


def test_a_tuned_proposal_spends_its_settings_budget_in_rounds_picked_from_what_was_measured(tmp_path):
    run = new_run(tmp_path, search="population", tune_budget=5, dispatch=False)
    batch = propose(run, vector_add("pass 300", header=TUNED))
    first_round = len(batch)
    assert first_round == 4                             # a third of the budget, at least 4
    gate_batch(run, batch)
    assert len(batch) == 5 and all(a.status == "passed" for a in batch)              # the budget, all gated
    later = batch[first_round]
    assert later.rationale.startswith("search population:") and later.label == batch[0].label
    assert len({tuple(sorted(a.defines.items())) for a in batch}) == 5               # no setting twice


def test_greedy_gates_the_untried_neighbours_of_each_tuned_proposal_s_fastest_setting(tmp_path):
    run = new_run(tmp_path, search="greedy", tune_budget=2, dispatch=False)
    batch = propose(run, vector_add("pass 300", header=TUNED))
    first = list(batch)
    gate_batch(run, batch)
    top = min(first, key=lambda a: a.score_us)
    extra = batch[len(first):]
    assert extra and all(a.rationale == f"neighbour of {top.id}" and a.parent == top.id for a in extra)
    steps = {32: 64, 64: 128, 128: 256, 256: 512, 512: 1024}
    near = {steps.get(top.defines["BLOCK"]), {v: k for k, v in steps.items()}.get(top.defines["BLOCK"])} - {None}
    tried = {a.defines["BLOCK"] for a in first}
    assert {a.defines["BLOCK"] for a in extra} == near - tried and all(a.status == "passed" for a in extra)


def test_without_refining_only_the_first_round_is_gated(tmp_path):
    run = new_run(tmp_path, search="population", tune_budget=12, refine=False, dispatch=False)
    batch = propose(run, vector_add("pass 300", header=TUNED))
    gate_batch(run, batch)
    assert len(batch) == 6 and len(gated(run)) == 6            # refine off: the whole budget (every setting) at once


def test_settings_that_win_on_different_cases_are_fitted_into_one_dispatch_rule_gated_with_the_batch(tmp_path):
    run = new_run(tmp_path, search="brute", tune_budget=6)
    source = vector_add("pass 300", header=TUNED.replace("fake-opt: BLOCK=256", "fake-opt: BLOCK=64")
                        + "\n// fake-opt@n64M: BLOCK=1024")
    batch = propose(run, source)
    gate_batch(run, batch)
    rules = [a for a in batch if a.dispatch]
    assert len(rules) == 1 and rules[0].status == "passed" and rules[0] is batch[-1]
    assert {b["defines"]["BLOCK"] for b in rules[0].dispatch} == {64, 1024}
