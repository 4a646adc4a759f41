"""Tests of kernel_forge/gate/recorded.py: the gate that answers from a run's recorded verdicts."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kernel_forge.app.run_setup import start_run
from kernel_forge.common.errors import InputError
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.gate.recorded import NO_PROFILE, RecordedGate
from kernel_forge.model.candidate import load_candidate, parse_candidate
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate, vector_add, write_proposals

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"
#: a matmul_f32 run recorded on an H200 (tests/data/make_recorded_run.py)
SHIPPED = ROOT / "tests" / "data" / "matmul_f32" / "run-001"


def finished_run(tmp_path: Path, sources: list[str]):
    """A replay run of ``sources`` with the scripted gate, run to its end (as test_loop's runs)."""
    task = load_task(MANIFEST)
    props = write_proposals(tmp_path / "props", sources)
    opt = start_run(MANIFEST, LoopConfig(archive="off", candidates=1, max_iterations=5), GateOptions(),
                    ProposerConfig(replay=str(props)), runs_dir=tmp_path / "runs", gate=ScriptedGate(task))
    opt.run()
    return opt


def test_recorded_gate_behaves_like_a_gate(tmp_path):
    opt = finished_run(tmp_path, [vector_add("mismatch 300"), vector_add("pass 400")])
    gate = RecordedGate.from_run(opt.run_dir.path)
    wrong, fast = opt._candidate(opt.state.attempts[1]), opt._candidate(opt.state.attempts[2])
    assert gate.evaluate(wrong).reason == "mismatch"
    ev = gate.evaluate(fast)
    assert ev.passed and {c.role for c in ev.cases} == {"correctness", "performance"}
    assert gate.evaluate(fast, roles=("holdout",)).passed
    old, new = gate.retime([wrong, fast])
    assert {c.role for c in new.cases} == {"performance"} and new.score_us == pytest.approx(400)
    assert gate.evaluate_baseline("cupy_add").passed
    assert gate.evaluate_baseline("nope").reason == "harness_error"
    assert gate.device_info()["name"] == "NVIDIA H200 (scripted)" and gate.calibrate()["bandwidth"] > 0
    gate.precompile([fast])
    unknown = replace(fast, source=fast.source + "\n// another\n")
    with pytest.raises(InputError, match="no recorded verdict"):
        gate.evaluate(unknown)
    assert gate.profile(unknown, ["n16M"]) == {"available": False, "reason": NO_PROFILE, "tool": "",
                                              "seconds": 0.0, "cases": {}}
    gate.close()


def test_the_shipped_run_s_verdicts_holdout_profile_baseline_and_device_are_answered_as_recorded():
    hist = json.loads((SHIPPED / "history.json").read_text())
    env = json.loads((SHIPPED / "env.json").read_text())
    att = {a["id"]: a for a in hist["attempts"]}
    gate = RecordedGate.from_run(SHIPPED)
    kernel = {i: load_candidate(SHIPPED / a["source_file"]) for i, a in att.items()}
    assert gate.evaluate(kernel["a0002"]).reason == att["a0002"]["reason"] == "mismatch"
    overfit = gate.evaluate(kernel["a0007"], roles=("holdout",))        # passed the visible cases, not the hidden one
    assert not overfit.passed and overfit.message == att["a0007"]["holdout"]["message"]
    assert gate.evaluate(kernel["a0004"], roles=("holdout",)).passed
    (best,) = gate.retime([kernel["a0004"]])
    assert best.score_us == att["a0004"]["evaluation"]["score_us"] and {c.role for c in best.cases} == {"performance"}
    prof = gate.profile(kernel["a0004"], ["large", "odd"])
    assert prof["available"] and set(prof["cases"]) == {"large"} and "attempt" not in prof
    assert not gate.profile(kernel["a0003"], ["large"])["available"]     # only the best was profiled
    assert gate.evaluate_baseline("cublas").label == "baseline:cublas" and gate.evaluate_baseline("cublas").passed
    assert gate.device_info() == env["device"] and gate.calibrate()["bandwidth"] == env["calibration"]["bandwidth"]


# -- a run folder written by hand ---------------------------------------------------------------

KERNEL = parse_candidate('extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) '
                         '{ c[0] = a[0] + b[0]; }', name="a0001.cu")
VERDICT = {"label": "a0001.cu", "passed": True, "reason": "passed", "score_us": 400.0, "cases": [
    {"name": "odd", "role": "correctness", "passed": True},
    {"name": "n16M", "role": "performance", "passed": True}]}


def run_folder(tmp_path: Path, attempt: dict, *, env=None, profile=None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.json").write_text(json.dumps({"attempts": [attempt], "baselines": {}}))
    if env is not None:
        (run / "env.json").write_text(json.dumps(env))
    if profile is not None:
        (run / "profiles").mkdir()
        (run / "profiles" / "a0001.json").write_text(json.dumps(profile))
    return run


def test_a_recorded_holdout_failure_is_answered_and_the_calls_are_recorded(tmp_path):
    holdout = {"passed": False, "reason": "holdout_failed", "message": "failed a hidden case"}
    gate = RecordedGate.from_run(run_folder(tmp_path, {"id": "a0001", "sha256": KERNEL.sha256, "evaluation": VERDICT,
                                                       "holdout": holdout}))
    ev = gate.evaluate(KERNEL, roles=("holdout",))
    assert (ev.passed, ev.reason, ev.message, ev.label) == (False, "holdout_failed", "failed a hidden case", "a0001.cu")
    perf = gate.evaluate(KERNEL, roles=("performance",))
    assert [c.name for c in perf.cases] == ["n16M"] and perf.score_us == 400.0
    assert gate.calls == [("evaluate", ("holdout",)), ("evaluate", ("performance",))]
    assert gate.device_info() is None and gate.calibrate() is None          # the run had no env.json


def test_a_recorded_profile_is_answered_for_the_cases_asked_without_its_bookkeeping(tmp_path):
    profile = {"attempt": "a0001", "wall_seconds": 12.5, "available": True, "reason": "", "tool": "ncu",
               "seconds": 3.0, "cases": {"odd": {"sm_pct": 10.0}, "n16M": {"sm_pct": 80.0}}}
    gate = RecordedGate.from_run(run_folder(tmp_path, {"id": "a0001", "sha256": KERNEL.sha256, "evaluation": VERDICT,
                                                       "profile": "profiles/a0001.json"}, profile=profile))
    assert gate.profile(KERNEL, ["n16M", "large"]) == {"available": True, "reason": "", "tool": "ncu", "seconds": 3.0,
                                                       "cases": {"n16M": {"sm_pct": 80.0}}}
    assert gate.calls == [("profile", ("a0001.cu", "n16M", "large"))]


def test_a_run_folder_that_is_not_a_history_is_refused_naming_the_file_and_place(tmp_path):
    run = run_folder(tmp_path, {"id": "a0001"}, env=["not", "an", "object"])
    with pytest.raises(InputError, match=r"env\.json: \$: expected an object, got list"):
        RecordedGate.from_run(run)
    (run / "env.json").unlink()
    (run / "history.json").write_text(json.dumps({"attempts": {"a0001": {}}}))
    with pytest.raises(InputError, match=r"history\.json: \$\.attempts: expected a list of attempts"):
        RecordedGate.from_run(run)
