"""kernel_forge.search.recording: a proposer's model calls written and counted, each proposal recorded as its
attempts (one pending per setting, or one failed that costs no GPU time), and each verdict applied.
The run is vector_add with the scripted gate (tests/fakes.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.history_log import read_history
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.task import load_task
from kernel_forge.model.verdict import Evaluation
from kernel_forge.proposers.base import Proposal, ProposalResult
from kernel_forge.search.loop import Optimizer
from kernel_forge.search.recording import (apply, calls_of, gate_attempt, record_calls, record_proposal,
                                           setting_attempt)
from kernel_forge.search.slots import Slot

from tests.support.fakes import ScriptedGate, ScriptedProposer, model_call, vector_add

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"
TUNED = "// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n// kforge: tune BLOCK = [128, 256, 512]"


def new_run(tmp_path, **loop) -> Optimizer:
    task = load_task(MANIFEST)
    run = Optimizer(task, ScriptedGate(task), ScriptedProposer([]), RunDir.create(tmp_path), LoopConfig(archive="off",
                                                                                                        **loop))
    run.messages = []
    run.progress = run.messages.append
    return run


def test_each_model_call_is_written_as_model_nnn_json_and_added_to_the_run_s_tokens_and_cost(tmp_path):
    run = new_run(tmp_path)
    run.state.iteration = 3
    result = ProposalResult(calls=[model_call(1000, 500, 0.01), model_call(200, 100, 0.002, error="invalid answer")])
    assert record_calls(run, result) == ["model-001.json", "model-002.json"]
    assert record_calls(run, ProposalResult(calls=[model_call(1, 1, 0.5)])) == ["model-003.json"]
    saved = json.loads((run.run_dir.path / "model-002.json").read_text())
    assert (saved["index"], saved["iteration"], saved["error"], saved["input_tokens"]) == (2, 3, "invalid answer", 200)
    assert run.state.tokens == {"input": 1201, "output": 601} and run.state.cost_usd == pytest.approx(0.512)
    assert run.state.per_model == {"openai:scripted-model": {"calls": 3, "input_tokens": 1201, "output_tokens": 601,
                                                             "cost_usd": pytest.approx(0.512)}}


def test_a_proposal_owns_the_calls_it_names_and_a_lone_proposal_every_call_of_its_request():
    calls = [model_call(cost_usd=0.1), model_call(cost_usd=0.2), model_call(cost_usd=0.3)]
    files = ["model-001.json", "model-002.json", "model-003.json"]
    named = Proposal(source="x", calls=[1, 2, 7])                    # 7: no such call, left out
    two = ProposalResult(proposals=[named, Proposal(source="y")], calls=calls)
    assert calls_of(named, two, files) == [("model-002.json", calls[1]), ("model-003.json", calls[2])]
    assert calls_of(two.proposals[1], two, files) == []             # one of several, naming none
    lone = ProposalResult(proposals=[Proposal(source="z")], calls=calls)
    assert [f for f, _ in calls_of(lone.proposals[0], lone, files)] == files


def test_a_tuned_proposal_is_one_pending_attempt_per_setting_the_first_carrying_its_calls_and_cost(tmp_path):
    run = new_run(tmp_path, search="brute")
    calls = [("model-001.json", model_call(1000, 500, 0.25)), ("model-002.json", model_call(10, 5, 0.125))]
    p = Proposal(source=vector_add("pass 300", header=TUNED), proposer="scripted", rationale="vectorise", parent="a9")
    out = record_proposal(run, p, Slot(direction="memory", technique="float4"), calls)
    assert [(a.id, a.status, a.defines) for a in out] == [("a0000", "pending", {"BLOCK": 128}),
                                                          ("a0001", "pending", {"BLOCK": 256}),
                                                          ("a0002", "pending", {"BLOCK": 512})]
    first = out[0]
    assert p.label == "a0000" and {a.label for a in out} == {"a0000"}    # its settings group under one label
    assert (first.direction, first.technique, first.parent, first.tunables) == ("memory", "float4", "a9",
                                                                                 {"BLOCK": [128, 256, 512]})
    assert first.model_calls == ["model-001.json", "model-002.json"] and out[2].model_calls == first.model_calls
    assert (first.cost_usd, first.tokens, out[1].cost_usd) == (0.375, {"input": 1010, "output": 505}, 0.0)
    written = (run.run_dir.path / out[1].source_file).read_text()
    assert out[1].source_file == "attempts/a0001.cu" and "define BLOCK = 256" in written
    assert run.state.attempts == out and run.kernels.bodies["a0002"] == run.kernels.bodies["a0000"]


def test_a_proposal_that_cannot_run_is_one_failed_attempt_with_its_reason_and_its_source_kept(tmp_path):
    run = new_run(tmp_path)
    conflict = Proposal(source=vector_add("pass 300", header=TUNED), proposer="m", launch={"grid": [4], "block": [64]})
    [a] = record_proposal(run, conflict, Slot())
    assert (a.status, a.reason) == ("failed", "launch_conflict") and "nothing was run" in a.message
    assert (run.run_dir.path / a.source_file).read_text() == conflict.source
    never = Proposal(source=vector_add("pass 300", header=TUNED + "\n// kforge: constraint BLOCK > 1024"), proposer="m")
    [b] = record_proposal(run, never, Slot())
    assert (b.id, b.status, b.reason) == ("a0001", "failed", "bad_candidate")
    assert b.message == "a0001.cu: no setting of its tunables satisfies its constraints"
    assert run.kernels.bodies == {}                   # neither is a kernel the de-duplication index knows


def test_a_kernel_gated_before_is_a_duplicate_that_names_the_earlier_attempt_and_its_verdict(tmp_path):
    run = new_run(tmp_path)
    [first] = record_proposal(run, Proposal(source=vector_add("pass 300"), proposer="m"), Slot())
    gate_attempt(run, first)
    again = Proposal(source="// reformatted\n" + vector_add("pass 300").replace("    ", "  "), proposer="m")
    [dup] = record_proposal(run, again, Slot())
    assert (dup.status, dup.reason) == ("failed", "duplicate")
    assert dup.message == ("the same kernel as a0000 (passed at 300.00 µs): same normalised source, launch and "
                           "defines; not gated again")
    assert run.messages[-1] == "[kforge]   a0001          m duplicate of a0000"


def test_a_verdict_is_recorded_on_its_attempt_and_a_harness_error_is_said_to_be_kforge_s_own(tmp_path):
    run = new_run(tmp_path)
    [a] = record_proposal(run, Proposal(source=vector_add("pass 250"), proposer="m", label="fast"), Slot())
    ev = gate_attempt(run, a)
    assert ev.passed and (a.status, a.reason, a.score_us) == ("passed", ev.reason, ev.score_us)
    assert a.evaluation == ev.to_json() and run.messages[-1].endswith("250.00 µs")
    assert [x["status"] for x in read_history(run.run_dir)["attempts"]] == ["passed"]      # saved at once
    apply(run, a, Evaluation(label="fast", passed=False, reason="harness_error", message="worker died: EOF"))
    assert (a.status, a.reason, a.score_us) == ("failed", "harness_error", None)
    assert run.messages[-1].endswith("harness_error (kernel_forge's own fault, not the kernel's: worker died: EOF)")


def test_a_further_setting_derives_from_the_best_setting_and_keeps_the_proposal_s_label_and_calls(tmp_path):
    run = new_run(tmp_path, search="brute")
    p = Proposal(source=vector_add("pass 300", header=TUNED.replace("512]", "512, 1024]")), proposer="m")
    out = record_proposal(run, p, Slot(direction="memory"), [("model-001.json", model_call())])
    top = out[1]
    more = setting_attempt(run, top, run.kernels.candidate(top), {"BLOCK": 1024}, "neighbour of a0001", like=out[0])
    assert (more.id, more.parent, more.label, more.defines, more.rationale) == \
        ("a0004", "a0001", out[0].label, {"BLOCK": 1024}, "neighbour of a0001")
    assert (more.direction, more.model_calls, more.status) == ("memory", ["model-001.json"], "pending")
    assert "define BLOCK = 1024" in (run.run_dir.path / "attempts" / "a0004.cu").read_text()
