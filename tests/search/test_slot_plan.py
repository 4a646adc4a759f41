"""kernel_forge.search.slot_plan: the slots of an iteration -- fix turns for the failed proposals of the one
before, translation directions while the run has no baseline, else the strategy's parents and
directions, with the bound pattern as a second parent where it wins a case.  vector_add with the
scripted gate (tests/fakes.py)."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.task import load_task
from kernel_forge.proposers.base import Proposal
from kernel_forge.search import translation
from kernel_forge.search.loop import Optimizer
from kernel_forge.search.recording import gate_attempt, record_proposal
from kernel_forge.search.run_start import evaluate_initial
from kernel_forge.search.slot_plan import fixes_of, plan_context, plan_slots
from kernel_forge.search.slots import Slot

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"


def new_run(tmp_path, proposer="scripted", initial=True, **loop) -> Optimizer:
    task = load_task(MANIFEST)
    run = Optimizer(task, ScriptedGate(task), ScriptedProposer([], name=proposer), RunDir.create(tmp_path),
                    LoopConfig(archive="off", **loop))
    if initial:
        evaluate_initial(run)
    return run


def gated(run, source, iteration=1, slot=None, proposer="m"):
    run.state.iteration = iteration
    [a] = record_proposal(run, Proposal(source=source, proposer=proposer), slot or Slot())
    gate_attempt(run, a)
    return a


def test_the_tuner_gets_empty_slots(tmp_path):
    run = new_run(tmp_path, proposer="tune", candidates=3)
    assert plan_slots(run, 1) == [Slot(), Slot(), Slot()]


def test_a_failed_proposal_of_the_iteration_before_gets_a_fix_turn_first_keeping_its_direction(tmp_path):
    run = new_run(tmp_path, candidates=2)
    broken = gated(run, vector_add("mismatch 300"), slot=Slot(direction="vectorise the loads", technique="float4"))
    gated(run, vector_add("pass 500"))                                       # passed: nothing to fix
    fix, other = plan_slots(run, 2)
    assert fix.direction == f"fix {broken.id} (mismatch), keeping its approach: vectorise the loads"
    assert fix.fix is broken and fix.parent is broken and fix.technique == "float4"
    assert other.fix is None and other.direction                             # the strategy's slot
    assert plan_slots(run, 3)[0].fix is None                                 # only the iteration just before


def test_no_fix_turn_for_a_duplicate_a_harness_error_a_chain_that_used_its_turns_or_with_fix_turns_off(tmp_path):
    run = new_run(tmp_path, candidates=2)
    harness = gated(run, vector_add("harness_error 100"))
    duplicate = record_proposal(run, Proposal(source=vector_add("harness_error 100"), proposer="m"), Slot())[0]
    assert (harness.reason, duplicate.reason) == ("harness_error", "duplicate")
    broken = gated(run, vector_add("mismatch 300"), slot=Slot(direction="unroll by 4"))
    assert fixes_of(run, 1) == [broken]
    again = gated(run, vector_add("compile_error 0"), iteration=2, slot=Slot(direction="fix it", fix=broken))
    assert again.fix_of == broken.id and fixes_of(run, 2) == []              # its one fix turn is spent
    run.config.fix_turns = 2
    assert fixes_of(run, 2) == [again]
    # the second turn keeps the approach of the proposal the chain began with
    assert plan_slots(run, 3)[0].direction == f"fix {again.id} (compile_error), keeping its approach: unroll by 4"
    run.config.fix_turns = 0
    assert fixes_of(run, 1) == []


def test_while_the_run_has_no_baseline_the_slots_are_translation_directions(tmp_path):
    run = new_run(tmp_path, initial=False, candidates=3)
    assert translation.translating(run.state)
    slots = plan_slots(run, 1)
    assert [s.direction for s in slots] == translation.directions(3)
    assert all(s.parent is None and s.second is None and s.fix is None for s in slots)


def test_the_strategy_plans_the_rest_from_the_run_as_it_stands(tmp_path):
    run = new_run(tmp_path, candidates=3, seed=5, crossover_every=4, min_improvement=0.02)
    ctx = plan_context(run, 2)
    assert (ctx.iteration, ctx.best, ctx.initial, ctx.seed) == (2, run.state.best, run.state.initial, 5)
    assert (ctx.crossover_every, ctx.min_improvement, ctx.attempts) == (4, 0.02, run.state.attempts)
    slots = plan_slots(run, 1)
    assert len(slots) == 3 and all(s.fix is None and s.direction for s in slots)


def test_the_bound_pattern_is_a_second_parent_once_an_iteration_where_it_is_faster_on_a_case(tmp_path):
    run = new_run(tmp_path, candidates=2)
    bound = gated(run, vector_add("pass 300"), iteration=0, proposer="bound")
    slots = plan_slots(run, 1)
    paired = [s for s in slots if s.second is bound]
    assert len(paired) == 1 and (paired[0].parent or run.state.best) is run.state.initial
    assert paired[0].technique
    # a bound pattern slower on every case has nothing to give
    slow = new_run(tmp_path / "slow", candidates=2)
    gated(slow, vector_add("pass 900"), iteration=0, proposer="bound")
    assert not any(s.second is not None and s.second.proposer == "bound" for s in plan_slots(slow, 1))
