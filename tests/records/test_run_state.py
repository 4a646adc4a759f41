"""The run's state (records/run_state.py) is saved and restored whole, in history.json's shape, and
the summary is built from it without an optimizer (CPU)."""
from __future__ import annotations

import json
from dataclasses import field, fields, make_dataclass
from pathlib import Path

import pytest

import kernel_forge.records.run_state as run_state_mod
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import resume_run, start_run
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.model.task import load_task
from kernel_forge.reports.summary import build_summary
from kernel_forge.records.attempt import Attempt
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.records.run_state import RunState

from tests.support.fakes import ScriptedGate, vector_add, write_proposals

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "matmul_f32" / "run-001"
NOW = 1_800_000_000.0


@pytest.fixture
def frozen(monkeypatch):
    """The state's clock stands still at NOW: the wall time saved is exactly the one it started with."""
    monkeypatch.setattr(run_state_mod.time, "time", lambda: NOW)


def _state() -> RunState:
    initial = Attempt(id="a0000", iteration=0, proposer="initial", status="passed", score_us=200.0,
                      best=True, baseline=True, evaluation={"passed": True, "cases": []})
    failed = Attempt(id="a0001", iteration=1, proposer="replay", label="01.cu", parent="a0000", status="failed",
                     reason="mismatch", message="c[3]: 1 != 2", cost_usd=0.25, tokens={"input": 10, "output": 5})
    best = Attempt(id="a0002", iteration=2, proposer="replay", label="02.cu", parent="a0000", status="passed",
                   score_us=100.0, best=True, retimed={"candidate_us": 100.0, "best_us": 200.0})
    return RunState(baselines={"cublas": {"score_us": 90.0, "passed": True}}, attempts=[initial, failed, best],
                    iteration=2, since_improvement=0, settled=True, tokens={"input": 10, "output": 5},
                    cost_usd=0.25, per_model={"anthropic:m": {"calls": 1, "input_tokens": 10, "output_tokens": 5,
                                                                "cost_usd": 0.25}},
                    profile_seconds={"a0002": 4.5}, elapsed_before=12.5, best=best, initial=initial,
                    started=NOW)


def test_a_state_read_back_from_its_own_json_is_the_same_state(frozen):
    state = _state()
    doc = json.loads(json.dumps(state.to_json()))
    back = RunState.from_json(doc, started=state.started)
    assert back == state
    assert back.best is back.attempts[2] and back.initial is back.attempts[0]   # found again, not copies
    assert back.speedup() == 2.0 and back.elapsed() == 12.5


def test_the_state_is_history_jsons_shape_and_this_processs_fields_stay_out(frozen):
    state = _state()
    state.stop_reason, state.stop_detail = "max_iterations", "2 of --max-iterations 2"
    doc = state.to_json()
    assert list(doc) == ["state", "baselines", "attempts"]
    assert list(doc["state"]) == ["iteration", "since_improvement", "settled", "tokens", "cost_usd", "per_model",
                                  "profile_seconds", "elapsed_s"]
    assert doc["state"]["elapsed_s"] == 12.5 and doc["attempts"][2]["id"] == "a0002"
    for name in ("best", "initial", "stop_reason", "stop_detail", "started", "elapsed_before"):
        assert name not in doc["state"] and name not in doc
    back = RunState.from_json(doc)
    assert back.stop_reason == "" and back.stop_detail == ""        # an outcome is not resumed


def test_the_saved_wall_time_is_the_runs_whole_wall_time_so_far(monkeypatch):
    clock = [NOW]
    monkeypatch.setattr(run_state_mod.time, "time", lambda: clock[0])
    state = RunState(elapsed_before=100.0, started=NOW)
    clock[0] += 20.25
    assert state.to_json()["state"]["elapsed_s"] == 120.25
    assert RunState.from_json(state.to_json(), started=clock[0]).elapsed() == 120.25    # the next process's start
    state.cost_usd = 0.1 + 0.2                       # saved to the micro-dollar
    assert state.to_json()["state"]["cost_usd"] == 0.3


def test_a_field_added_to_the_state_is_saved_and_restored_without_touching_resume_code(frozen):
    extended = make_dataclass("Extended", [("retries", int, field(default=0)),
                                           ("notes", dict, field(default_factory=dict))], bases=(RunState,))
    state = extended(retries=3, notes={"a0001": "flaky"}, iteration=4, started=NOW)
    doc = json.loads(json.dumps(state.to_json()))
    assert doc["state"]["retries"] == 3 and doc["state"]["notes"] == {"a0001": "flaky"}
    back = extended.from_json(doc, started=state.started)
    assert back == state and back.retries == 3 and back.iteration == 4


def test_missing_values_take_their_defaults_and_the_attempts_are_required():
    back = RunState.from_json({"attempts": []})
    assert back.iteration == 0 and back.settled is True and back.tokens == {"input": 0, "output": 0}
    assert back.baselines == {} and back.best is None and back.initial is None
    with pytest.raises(KeyError):
        RunState.from_json({"state": {"iteration": 1}})


def test_the_best_is_the_last_attempt_marked_best_else_the_baseline():
    doc = {"attempts": [Attempt(id="a0000", iteration=1, proposer="replay", status="passed", score_us=5.0,
                                baseline=True).to_json(),
                        Attempt(id="a0001", iteration=1, proposer="replay", status="passed").to_json()]}
    back = RunState.from_json(doc)
    assert back.initial.id == "a0000" and back.best.id == "a0000"      # a translation baseline, no best yet
    doc["attempts"][1]["best"] = True
    assert RunState.from_json(doc).best.id == "a0001"


def test_the_recorded_run_reads_back_and_writes_the_same_state(frozen):
    hist = json.loads((RECORDED / "history.json").read_text())
    state = RunState.from_json(hist, started=NOW)
    doc = state.to_json()
    assert doc["state"] == hist["state"] and list(doc["state"]) == list(hist["state"])
    assert doc["baselines"] == hist["baselines"]
    for wrote, recorded in zip(doc["attempts"], hist["attempts"], strict=True):
        assert {k: wrote[k] for k in recorded} == recorded          # newer fields added with their defaults
    assert state.best.id == "a0004" and state.initial.id == "a0000"


def test_the_summary_is_built_from_the_recorded_state_without_an_optimizer(frozen):
    recorded = json.loads((RECORDED / "summary.json").read_text())
    state = RunState.from_json(json.loads((RECORDED / "history.json").read_text()), started=NOW,
                               stop_reason=recorded["stop_reason"])
    summary = build_summary(state, load_task(ROOT / "manifests" / "matmul_f32.json"), RunDir(RECORDED),
                            proposer=recorded["proposer"], search=recorded.get("search", {}))
    for key in ("task", "run", "stop_reason", "iterations", "attempts", "gated", "passed", "rejected", "tokens",
                "cost_usd", "per_model", "proposer", "baselines"):
        assert summary[key] == recorded[key], key
    assert summary["wall_seconds"] == round(hist_elapsed(), 2)
    best = recorded["best"]
    assert {k: summary["best"][k] for k in ("id", "score_us", "speedup_vs_initial", "speedup_vs_baselines")} == \
        {k: best[k] for k in ("id", "score_us", "speedup_vs_initial", "speedup_vs_baselines")}
    assert [r["case"] for r in summary["best"]["per_case"]] == [r["case"] for r in best["per_case"]]
    assert summary["diagnosis"]["cases"] and summary["initial"]["id"] == recorded["initial"]["id"]


def hist_elapsed() -> float:
    return json.loads((RECORDED / "history.json").read_text())["state"]["elapsed_s"]


def test_a_resumed_optimizer_restores_the_state_the_run_left_in_one_piece(tmp_path):
    task = load_task(ROOT / "manifests" / "vector_add.json")
    props = write_proposals(tmp_path / "props", [vector_add("mismatch 300"), vector_add("pass 400"),
                                                 vector_add("pass 350")])
    opt = start_run(ROOT / "manifests" / "vector_add.json", LoopConfig(max_iterations=2, candidates=1, archive="off"),
                    GateOptions(), ProposerConfig(replay=str(props)), runs_dir=tmp_path / "runs",
                    gate=ScriptedGate(task))
    opt.run()
    again = resume_run(opt.run_dir.path, gate=ScriptedGate(task))
    assert again.load_recorded()
    saved = [f.name for f in RunState.saved_fields() if f.name != "elapsed_before"]
    assert {n: getattr(again.state, n) for n in saved} == {n: getattr(opt.state, n) for n in saved}
    assert again.state.best == opt.state.best and again.state.initial == opt.state.initial
    assert again.state.best is not None and again.state.best in again.state.attempts
    assert {f.name for f in fields(RunState)} - set(saved) == {"elapsed_before", "best", "initial", "stop_reason",
                                                               "stop_detail", "started"}
