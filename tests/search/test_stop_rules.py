"""The stop rules (search/stop_rules.py), each fired by the figure it reads, with what it saw."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.task import load_task
from kernel_forge.search.run_context import RunContext
from kernel_forge.search.stop_rules import StopRun, check_stop, iteration_limit, time_limit, time_up

from tests.support.fakes import ScriptedGate, ScriptedProposer

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"


def context(tmp_path, proposer: str = "scripted", **loop) -> RunContext:
    task = load_task(MANIFEST)
    return RunContext(task, ScriptedGate(task), ScriptedProposer([], name=proposer), RunDir.create(tmp_path),
                      LoopConfig(archive="off", **loop), progress=lambda m: None)


def fired(run: RunContext) -> tuple[str, str] | None:
    try:
        check_stop(run)
    except StopRun as stop:
        return stop.reason, stop.detail
    return None


def test_models_get_seven_iterations_by_default_and_the_tuner_none():
    assert iteration_limit(LoopConfig(), "anthropic") == 7
    assert iteration_limit(LoopConfig(), "tune") is None
    assert iteration_limit(LoopConfig(max_iterations=3), "tune") == 3


def test_the_iteration_limit_says_how_many_of_how_many(tmp_path):
    run = context(tmp_path, max_iterations=3)
    run.state.iteration = 2
    assert fired(run) is None
    run.state.iteration = 3
    assert fired(run) == ("max_iterations", "3 of --max-iterations 3")


@pytest.mark.parametrize("loop, spent, reason", [
    (dict(budget_usd=0.5), dict(cost_usd=0.5), "budget_usd"),
    (dict(max_tokens=1000), dict(tokens={"input": 600, "output": 400}), "max_tokens"),
    (dict(patience=2), dict(since_improvement=2), "patience"),
])
def test_each_budget_stops_the_run_once_reached(tmp_path, loop, spent, reason):
    run = context(tmp_path, **loop)
    assert fired(run) is None
    for k, v in spent.items():
        setattr(run.state, k, v)
    assert fired(run)[0] == reason


def test_the_tuner_has_its_own_time_limit_and_any_run_a_given_one(tmp_path):
    tuner = context(tmp_path / "t", proposer="tune", tune_time_limit_s=100)
    assert time_limit(tuner) == (100, "the built-in tuner's default time limit (--tune-time-limit; --time-limit "
                                      "sets any run's)")
    run = context(tmp_path / "m", time_limit_s=10)
    assert time_limit(run) == (10, "--time-limit") and not time_up(run)
    run.state.elapsed_before = 10.0
    assert time_up(run) and fired(run)[0] == "time_limit" and "of 10 s (--time-limit)" in fired(run)[1]


def test_the_roof_waits_for_every_bound_pattern_s_gate(tmp_path, monkeypatch):
    """A best at the roof stops the run only once each bound pattern was gated: the residual add of
    llm.c stopped at its naive kernel (97 % of copy bandwidth on the H100) while its own kernel
    was 20 % faster, because the roof fired before the bound pattern's gate."""
    import kernel_forge.search.stop_rules as stop_rules
    from kernel_forge.records.attempt import Attempt

    monkeypatch.setattr(stop_rules, "roof_reached", lambda run, share: (True, "at the roof"))
    run = context(tmp_path, roof_stop=0.9)
    run.proposer.bound = [tmp_path / "x" / "bound_elementwise.cu", tmp_path / "y" / "bound_elementwise_vec.cu"]
    assert stop_rules.bound_not_gated(run) == ["gate:bound_elementwise.cu", "gate:bound_elementwise_vec.cu"]
    assert fired(run) is None
    run.state.attempts.append(Attempt(id="a0001", iteration=1, proposer="tune", label="gate:bound_elementwise.cu"))
    assert fired(run) is None
    run.state.attempts.append(Attempt(id="a0002", iteration=1, proposer="tune", label="gate:bound_elementwise_vec.cu",
                                      status="failed"))
    assert fired(run) == ("roof_stop", "at the roof")
    # a model run, or a task of no known kind (no bound patterns): the roof as before
    assert fired(context(tmp_path / "m", roof_stop=0.9)) == ("roof_stop", "at the roof")
