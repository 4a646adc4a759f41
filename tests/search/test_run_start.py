"""kernel_forge.search.run_start: how a run starts and resumes -- the initial kernel gated as the baseline, the
bound pattern gated once, the vendor baselines timed once, the recorded history read back and the
iteration a kill interrupted found again.  vector_add with the scripted gate (tests/fakes.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernel_forge.common.errors import KForgeError
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.task import load_task
from kernel_forge.proposers.base import Proposal
from kernel_forge.records.attempt import Attempt
from kernel_forge.search.loop import Optimizer
from kernel_forge.search.recording import record_proposal
from kernel_forge.search.run_start import (evaluate_bound, evaluate_initial, load_recorded, time_baselines,
                                           unsettled_batch)
from kernel_forge.search.slots import Slot
from kernel_forge.search.stop_rules import StopRun

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"


def task_copy(folder: Path, *, initial: str | None = None, templates: bool = True) -> Path:
    """vector_add in ``folder``: its initial kernel replaced by ``initial``, its templates dropped unless asked."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "references" / "vector_add.py", folder / "vector_add.py")
    data = json.loads(MANIFEST.read_text())
    data.pop("$schema")
    data["reference"] = {"python": "vector_add.py:reference"}
    data["baselines"] = {"cupy_add": {"python": "vector_add.py:cupy_add"}}
    if not templates:
        data.pop("templates")
    (folder / "vector_add.cu").write_text(initial if initial is not None else
                                          (ROOT / "manifests" / "vector_add.cu").read_text())
    (folder / "vector_add.json").write_text(json.dumps(data))
    return folder / "vector_add.json"


def new_run(tmp_path, manifest=MANIFEST, *, proposer="scripted", run_dir=None, **loop) -> Optimizer:
    task = load_task(manifest)
    run = Optimizer(task, ScriptedGate(task), ScriptedProposer([], name=proposer),
                    run_dir or RunDir.create(tmp_path / "runs"), LoopConfig(archive="off", **loop))
    run.messages = []
    run.progress = run.messages.append
    return run


def test_the_initial_kernel_is_gated_on_every_role_and_becomes_the_baseline_and_first_best(tmp_path):
    run = new_run(tmp_path)
    evaluate_initial(run)
    initial = run.state.initial
    assert run.state.best is initial and initial.best and initial.baseline
    assert (initial.id, initial.proposer, initial.label, initial.status) == ("a0000", "initial", "vector_add.cu", "passed")
    assert run.gate.calls == [("evaluate", "a0000.cu", ("correctness", "performance", "holdout"))]
    assert "holdout" in {c["role"] for c in initial.evaluation["cases"]}


def test_an_initial_kernel_that_fails_the_gate_stops_the_run_with_its_verdict(tmp_path):
    run = new_run(tmp_path, task_copy(tmp_path / "task", initial=vector_add("mismatch 100")))
    with pytest.raises(KForgeError) as info:
        evaluate_initial(run)
    assert info.value.message.startswith("the task's initial kernel fails the gate (mismatch): case odd:")
    assert info.value.hint == "fix the initial kernel or the manifest first: kforge eval MANIFEST"
    assert run.state.best is None and run.state.initial.status == "failed"


def test_the_vendor_baselines_are_timed_once_a_run(tmp_path):
    run = new_run(tmp_path)
    time_baselines(run)
    assert list(run.state.baselines) == ["cupy_add"] and run.messages == ["[kforge] timing vendor baseline cupy_add"]
    assert run.state.baselines["cupy_add"]["kind"] == "baseline"
    time_baselines(run)
    assert run.gate.calls == [("baseline", "cupy_add")]


def test_with_a_model_the_bound_pattern_is_gated_once_at_its_default_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))          # where bound patterns are written
    run = new_run(tmp_path, task_copy(tmp_path / "task", templates=False), proposer="anthropic:m")
    evaluate_initial(run)
    evaluate_bound(run)
    bound = run.state.attempts[1]
    assert (bound.proposer, bound.label, bound.status) == ("bound", "gate:bound_elementwise.cu", "passed")
    assert bound.rationale == "the elementwise pattern bound to this task's signature, at its default setting"
    assert run.messages[0].startswith("[kforge]   a0000") and run.messages[1].startswith("[kforge] kind: elementwise")
    assert run.kernels.candidate(bound).tunables == {}          # every tunable pinned to its default
    assert run.state.best is run.state.initial                  # as fast as the initial kernel: not a new best
    evaluate_bound(run)
    assert len(run.state.attempts) == 2                          # gated once a run


def test_a_recorded_history_is_read_back_and_an_earlier_release_s_stalled_initial_settings_are_settled(tmp_path):
    first = new_run(tmp_path)
    assert load_recorded(first) is False                        # a new run: nothing recorded
    evaluate_initial(first)
    stalled = Attempt(id="a0001", iteration=0, proposer="initial", label="vector_add.cu", status="pending",
                      defines={"BLOCK": 512}, source_file="attempts/a0000.cu")
    first.state.attempts.append(stalled)
    first.save()
    again = new_run(tmp_path, run_dir=first.run_dir)
    assert load_recorded(again) is True
    loaded = again.state.attempts
    assert [a.id for a in loaded] == ["a0000", "a0001"] and again.state.best.id == "a0000"
    assert (loaded[1].status, loaded[1].reason) == ("failed", "duplicate")
    assert loaded[1].message.startswith("a further setting of the initial kernel recorded by an earlier release")
    assert set(again.kernels.bodies) == {"a0000", "a0001"}


def test_the_iteration_a_kill_interrupted_is_found_again_with_its_gated_attempts(tmp_path):
    run = new_run(tmp_path)
    evaluate_initial(run)
    assert unsettled_batch(run) is None                          # settled, nothing pending
    run.state.iteration = 2
    gated = record_proposal(run, Proposal(source=vector_add("pass 300"), proposer="m"), Slot())[0]
    gated.iteration, gated.status = 2, "failed"
    pending = record_proposal(run, Proposal(source=vector_add("pass 200"), proposer="m"), Slot())[0]
    pending.iteration = 2
    run.state.iteration = 3                                     # a count moved on before the kill
    assert unsettled_batch(run) == [gated, pending] and run.state.iteration == 2
    run.config.time_limit_s = 1e-9                              # the time limit passed: left pending
    with pytest.raises(StopRun) as info:
        unsettled_batch(run)
    assert info.value.reason == "time_limit"
