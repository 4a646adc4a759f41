"""kernel_forge.search.run_context: what one run's loop reads and changes -- its collaborators, a fresh state,
the indexes built from its settings -- and the four duties only the loop itself can do."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.task import load_task
from kernel_forge.search.retrieval import Retrieved
from kernel_forge.search.run_context import RunContext

from tests.support.fakes import ScriptedGate, ScriptedProposer

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"


def context(tmp_path, proposer="scripted", retrieved=None, **loop) -> RunContext:
    task = load_task(MANIFEST)
    return RunContext(task, ScriptedGate(task), ScriptedProposer([], name=proposer), RunDir.create(tmp_path),
                      LoopConfig(archive="off", **loop), progress=lambda m: None, retrieved=retrieved)


def test_a_run_context_builds_its_strategy_rules_and_indexes_from_the_settings(tmp_path):
    run = context(tmp_path, search="anneal", retime_rounds=3, min_improvement=0.05, seed=7)
    assert run.strategy.name == "anneal"
    assert (run.rules.rounds, run.rules.min_improvement) == (3, 0.05)
    assert run.spaces.kernels is run.kernels and run.diagnoses.kernels is run.kernels
    assert run.spaces.strategy is run.strategy and run.spaces.config.seed == 7
    assert run.kernels.run_dir is run.run_dir and run.diagnoses.gate is run.gate
    assert run.state.attempts == [] and run.state.best is None and run.manifest_sha256 is None
    assert run.retrieved.examples == [] and run.retrieved.settings == {}       # nothing from an archive
    given = Retrieved(settings={"t.cu": [{"BLOCK": 64}]})
    assert context(tmp_path / "b", retrieved=given).retrieved is given


def test_only_the_built_in_tuner_is_the_tuner(tmp_path):
    assert context(tmp_path / "a", proposer="tune").is_tuner is True
    assert context(tmp_path / "b", proposer="anthropic:claude-x").is_tuner is False


def test_an_unknown_search_strategy_is_refused_when_the_context_is_built(tmp_path):
    task = load_task(MANIFEST)
    config = LoopConfig(archive="off")
    config.search = "hillclimb"                   # past the settings' own check, as a hand-edited run.json would be
    with pytest.raises(InputError, match="--search 'hillclimb': no such search strategy"):
        RunContext(task, ScriptedGate(task), ScriptedProposer([]), RunDir.create(tmp_path), config, progress=print)


@pytest.mark.parametrize("duty", ["save", "save_soon", "write_best", "profile"])
def test_saving_writing_the_best_and_profiling_are_left_to_the_loop(tmp_path, duty):
    run = context(tmp_path)
    with pytest.raises(NotImplementedError):
        getattr(run, duty)(*([None] if duty == "profile" else []))
