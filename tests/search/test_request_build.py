"""kernel_forge.search.request_build: the request of an iteration -- one ProposalSlot per slot with its own
prompt after a shared static prefix, only the slots for a proposer that reads no prompt, and the
translation prompt while the run has no baseline.  vector_add with the scripted gate (tests/fakes.py)."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.task import load_task
from kernel_forge.proposers.base import Proposal
from kernel_forge.search.loop import Optimizer
from kernel_forge.search.prompts import system_prompt
from kernel_forge.search.recording import gate_attempt, record_proposal
from kernel_forge.search.request_build import build_request, prompt_attempt
from kernel_forge.search.run_start import evaluate_initial
from kernel_forge.search.slots import Slot

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"


def new_run(tmp_path, proposer="scripted", initial=True, reads_prompt=True, **loop) -> Optimizer:
    task = load_task(MANIFEST)
    model = ScriptedProposer([], name=proposer)
    model.needs_prompt = reads_prompt
    run = Optimizer(task, ScriptedGate(task), model, RunDir.create(tmp_path), LoopConfig(archive="off", **loop))
    if initial:
        evaluate_initial(run)
    return run


def gated(run, source, slot=None, **kw):
    run.state.iteration = 1
    [a] = record_proposal(run, Proposal(source=source, proposer="m", **kw), slot or Slot())
    gate_attempt(run, a)
    return a


def test_a_proposer_that_reads_no_prompt_gets_only_its_slots_and_the_tuner_what_it_has_spent(tmp_path):
    run = new_run(tmp_path, reads_prompt=False)
    request = build_request(run, [Slot(direction="a"), Slot(direction="b", technique="t")], 4)
    assert (request.system, request.prompt, request.static_prefix, request.n, request.iteration) == ("", "", "", 2, 4)
    assert [(s.direction, s.parent, s.technique, s.prompt) for s in request.slots] == \
        [("a", "a0000", "", None), ("b", "a0000", "t", None)]                    # each starts from the best
    assert (request.spent, request.passed) == ([], [])
    tuner = new_run(tmp_path / "tune", proposer="tune", reads_prompt=False)
    assert build_request(tuner, [Slot()], 1).passed == ["vector_add.cu"]       # the labels that passed


def test_each_slot_gets_its_own_prompt_after_one_static_prefix_and_the_source_it_builds_on(tmp_path):
    run = new_run(tmp_path)
    broken = gated(run, vector_add("mismatch 300"), rationale="unrolled")
    slots = [Slot(direction="vectorise the loads"), Slot(direction="fix it", fix=broken, parent=broken)]
    request = build_request(run, slots, 2)
    assert request.system == system_prompt() and request.n == 2 and request.iteration == 2
    assert request.static_prefix.startswith("# Task: vector_add") and "# Current best" not in request.static_prefix
    plain, fix = request.slots
    assert request.prompt == plain.prompt and plain.prompt.startswith("# Current best: a0000")
    assert "vectorise the loads" in plain.prompt and "# Fix this failed attempt" not in plain.prompt
    assert f"# Fix this failed attempt: {broken.id}" in fix.prompt
    assert plain.parent_source == run.kernels.source(run.state.best)
    assert fix.parent_source == run.kernels.source(broken) and fix.parent == broken.id
    # the failure a slot fixes is listed among no slot's recent failures: the shared part is the same in each
    assert f"- {broken.id}: mismatch" not in plain.prompt and f"- {broken.id}: mismatch" not in fix.prompt


def test_while_translating_each_slot_gets_the_translation_prompt_and_a_harness_failure_is_never_shown(tmp_path):
    run = new_run(tmp_path, initial=False)
    harness = gated(run, vector_add("harness_error 100"))
    wrong = gated(run, vector_add("mismatch 100"))
    request = build_request(run, [Slot(direction="a direct translation"), Slot(direction="fix", fix=wrong)], 2)
    new, fix = request.slots
    assert request.system == system_prompt() and request.static_prefix and request.prompt == new.prompt
    assert "a direct translation" in new.prompt and new.parent_source == ""              # nothing to edit
    assert fix.parent_source == run.kernels.source(wrong)
    assert wrong.id in new.prompt and harness.id not in new.prompt + fix.prompt + request.static_prefix


def test_an_attempt_is_shown_with_its_change_from_its_parent_and_the_task_s_launch_where_it_gave_none(tmp_path):
    run = new_run(tmp_path)
    child = gated(run, vector_add("pass 300"), parent="a0000")
    shown = prompt_attempt(run, child)
    assert (shown.id, shown.passed, shown.parent, shown.source) == (child.id, True, "a0000", run.kernels.source(child))
    assert shown.diff.startswith(f"--- a0000.cu\n+++ {child.id}.cu\n") and '+#define FAKE_SCRIPT "pass 300"' in shown.diff
    assert shown.launch == {"grid": ["cdiv(n, 256)"], "block": [256], "shared_mem": 0}
    assert all(c["role"] != "holdout" for c in shown.cases) and shown.profile is None
