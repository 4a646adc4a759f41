"""kernel_forge.search.diagnoses: the diagnoses a run's prompts and strategies read -- of the current best and
of any passed parent, each computed once per attempt and profile -- and the directions they offer.
vector_add with the scripted gate (tests/fakes.py), whose profiler answers like a working ncu."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.analysis.diagnosis import diagnose
from kernel_forge.analysis.directions import direction_items
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.gate.profiler import save_profile
from kernel_forge.model.task import load_task
from kernel_forge.proposers.base import Proposal
from kernel_forge.search import diagnoses
from kernel_forge.search.loop import Optimizer
from kernel_forge.search.recording import gate_attempt, record_proposal
from kernel_forge.search.run_start import evaluate_initial
from kernel_forge.search.slots import Slot

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"


def new_run(tmp_path) -> Optimizer:
    task = load_task(MANIFEST)
    run = Optimizer(task, ScriptedGate(task, profiler=True), ScriptedProposer([]), RunDir.create(tmp_path),
                    LoopConfig(archive="off"))
    evaluate_initial(run)
    return run


def faster(run, us=300):
    [a] = record_proposal(run, Proposal(source=vector_add(f"pass {us}"), proposer="m"), Slot())
    gate_attempt(run, a)
    return a


def profiled(run, a):
    cand = run.kernels.candidate(a)
    a.profile = save_profile(run.run_dir, a.id, run.gate.profile(cand, ["n16M", "n64M"]))
    return a.profile


def test_the_best_s_diagnosis_is_computed_once_per_best_and_profile(tmp_path):
    run = new_run(tmp_path)
    first = run.diagnoses.of_best(run.state)
    assert run.diagnoses.of_best(run.state) is first
    assert [c.name for c in first.cases] == ["n16M", "n64M"] and all(c.vs_initial == 1.0 for c in first.cases)
    profiled(run, run.state.best)
    with_profile = run.diagnoses.of_best(run.state)
    assert with_profile is not first and with_profile.profile_status["available"] is True
    new = faster(run)
    run.state.best = new
    diag = run.diagnoses.of_best(run.state)
    assert diag is not with_profile and all(round(c.vs_initial, 6) == 2.0 for c in diag.cases)   # 600 -> 300 µs


def test_a_parent_s_diagnosis_is_kept_per_attempt_and_profile(tmp_path):
    run = new_run(tmp_path)
    parent = faster(run, 400)
    once = run.diagnoses.of(parent, run.state)
    assert run.diagnoses.of(parent, run.state) is once
    assert all(round(c.vs_initial, 6) == 1.5 for c in once.cases)                    # 600 -> 400 µs
    profiled(run, parent)
    assert run.diagnoses.of(parent, run.state) is not once


def test_an_attempt_s_profile_is_read_from_its_file_and_one_without_has_none(tmp_path):
    run = new_run(tmp_path)
    a = faster(run)
    assert run.diagnoses.profile_of(a) is None
    name = profiled(run, a)
    assert name == f"profiles/{a.id}.json"
    got = run.diagnoses.profile_of(a)
    assert got["attempt"] == a.id and got["available"] is True and set(got["cases"]) == {"n16M", "n64M"}


def test_the_directions_offered_for_a_parent_come_from_its_own_diagnosis_the_best_s_from_the_one_kept(
        tmp_path, monkeypatch):
    run = new_run(tmp_path)
    parent = faster(run, 400)
    assert run.diagnoses.options(parent, 3, run.state) == direction_items(run.diagnoses.of(parent, run.state), 3)
    made = []
    monkeypatch.setattr(diagnoses, "diagnose", lambda *a, **kw: made.append(1) or diagnose(*a, **kw))
    kept = run.diagnoses.of_best(run.state)
    best = run.diagnoses.options(run.state.best, 2, run.state)
    assert best == direction_items(kept, 2) and len(best) == 2
    assert len(made) == 1                                # the best's diagnosis is not made a second time
