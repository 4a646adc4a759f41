"""kernel_forge.search.run_spaces: the spaces of the tunable kernels a run has met -- what was measured of each
setting, which settings a proposal gates first, the tuner's budget split between its templates, and
where the search stands.  vector_add with the scripted gate (tests/fakes.py)."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import load_task
from kernel_forge.proposers.base import Proposal
from kernel_forge.search.loop import Optimizer
from kernel_forge.search.recording import gate_attempt, record_proposal
from kernel_forge.search.slots import Slot

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"
HEADER = "// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n// kforge: tune BLOCK = [{}]"
THREE = vector_add("pass 300", header=HEADER.format("128, 256, 512"))
SIX = vector_add("pass 300", variant="six", header=HEADER.format("32, 64, 128, 256, 512, 1024"))


def new_run(tmp_path, proposer="scripted", **loop) -> Optimizer:
    task = load_task(MANIFEST)
    return Optimizer(task, ScriptedGate(task), ScriptedProposer([], name=proposer), RunDir.create(tmp_path),
                     LoopConfig(archive="off", **loop))


def recorded(run, source, label="", proposer="m"):
    return record_proposal(run, Proposal(source=source, proposer=proposer, label=label), Slot())


def test_a_kernel_s_space_holds_every_recorded_setting_of_its_body_with_what_was_measured(tmp_path):
    run = new_run(tmp_path, search="brute", seed=7)
    fast, wrong, ruled = recorded(run, THREE)
    fast.status, fast.score_us = "passed", 300.0
    wrong.status, wrong.reason, wrong.score_us = "failed", "holdout_failed", 250.0    # timed, but failed: no time
    ruled.status, ruled.reason = "failed", "duplicate"
    cand = run.kernels.candidate(fast)
    space = run.spaces.space(cand, fast.label, run.state.attempts)
    assert space.counts() == {"label": "a0000", "settings": 3, "exact": True, "gated": 2, "passed": 1, "failed": 1,
                              "ruled_out": 1, "pending": 0, "best": fast.id, "best_us": 300.0}
    assert space.exhausted() and space.seed == 7
    assert next(t for t in space.trials.values() if t.attempt == wrong.id).score is None
    reformatted = parse_candidate(THREE.replace("    ", "  "), name="x.cu")
    assert run.spaces.space(reformatted, "other", run.state.attempts) is space and len(run.spaces.spaces) == 1


def test_the_tuner_s_budget_is_split_between_its_templates_and_a_model_s_proposal_gets_the_whole_budget(tmp_path):
    run = new_run(tmp_path, proposer="tune", search="brute", tune_budget=1)
    [first] = recorded(run, THREE, label="three.cu", proposer="tune")          # one of its three settings
    gate_attempt(run, first)
    run.config.tune_budget = 5
    proposals = [Proposal(source=THREE, label="three.cu"), Proposal(source=SIX, label="six.cu"),
                 Proposal(source="// kforge: grid = [\n", label="broken.cu")]
    run.spaces.allocate(proposals, run.state.attempts, tuner=True)
    # brute: each template its budget, but never more than it has left (a broken one gets nothing)
    assert run.spaces.allot == {"three.cu": 3 - 1, "six.cu": 5}
    assert (run.spaces.budget("three.cu"), run.spaces.budget("another.cu")) == (2, 5)
    run.spaces.allocate(proposals, run.state.attempts, tuner=False)
    assert run.spaces.allot == {} and run.spaces.budget("three.cu") == 5


def test_the_first_settings_are_its_one_setting_a_greedy_sample_or_the_strategy_s_picks_with_reasons(tmp_path):
    run = new_run(tmp_path, search="greedy", tune_budget=2)
    plain = parse_candidate(vector_add("pass 300"), name="p.cu")
    p = Proposal(source=vector_add("pass 300"), label="p")
    assert run.spaces.first_settings(p, plain, [], set(), [], 1) == [({}, "")]
    assert run.spaces.first_settings(p, plain, [], {()}, [], 1) == []              # its one setting was tried
    six = parse_candidate(SIX, name="s.cu")
    warm = [{"BLOCK": 256}]
    picked = run.spaces.first_settings(Proposal(source=SIX, label="s"), six, warm, {(("BLOCK", 64),)}, [], 1)
    assert len(picked) == 1 and all(why == "" for _, why in picked)             # the budget less the warm one
    assert picked[0][0]["BLOCK"] not in (64, 256)
    population = new_run(tmp_path / "pop", search="population", tune_budget=12)
    picked = population.spaces.first_settings(Proposal(source=SIX, label="s"), six, [], set(), [], 1)
    assert len(picked) == 4 and all(why for _, why in picked)                   # a third of 12, each with why
    assert len({d["BLOCK"] for d, _ in picked}) == 4


def test_where_the_tuner_s_search_stands_per_template(tmp_path):
    run = new_run(tmp_path, proposer="tune", search="brute")
    attempts = recorded(run, THREE, label="three.cu", proposer="tune")
    assert run.spaces.line(run.state.attempts) == "three.cu: 0 of 3 settings gated" and run.spaces.spent([]) == []
    for a in attempts:
        gate_attempt(run, a)
    attempts[1].status = "failed"
    assert run.spaces.line(run.state.attempts) == "three.cu: 3 of 3 settings gated, 1 of them failed"
    assert run.spaces.spent(run.state.attempts) == ["three.cu"]
    assert list(run.spaces.tuner_templates(run.state.attempts)) == ["three.cu"]
    summary = run.spaces.summary(run.state.attempts)
    assert summary["strategy"] == "brute" and [s["label"] for s in summary["spaces"]] == ["three.cu"]
    assert summary["spaces"][0]["gated"] == 3 and summary["spaces"][0]["failed"] == 1


def test_each_round_s_random_choices_are_the_same_for_the_same_run_seed_iteration_label_and_round(tmp_path):
    spaces = new_run(tmp_path, seed=3).spaces
    draw = lambda *key: spaces.rng(*key).random()  # noqa: E731
    assert draw(2, "t", 0) == draw(2, "t", 0)
    assert len({draw(2, "t", 0), draw(3, "t", 0), draw(2, "u", 0), draw(2, "t", 4)}) == 4
