"""With a model, the pattern of the task's kind bound to its signature is gated once at the start
and goes into the prompt as a kernel already adapted to the signature, with its gated time, and
as a second parent (scripted gate and model, no GPU, no network)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import start_run
from kernel_forge.model.task import load_task
from kernel_forge.search.prompt_blocks import PromptAttempt
from kernel_forge.search.prompts import PromptContext, build_prompt_parts

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"


def _attempt(id_, source, us):
    return PromptAttempt(id=id_, source=source, passed=True, reason="passed", message="", score_us=us)


def test_the_prompt_shows_the_bound_pattern_with_its_time_once():
    task = load_task(MANIFEST)
    best = _attempt("a0000", vector_add(), 600.0)
    bound = _attempt("a0001", "// the bound kernel\n" + vector_add(variant="bound"), 123.4)
    common = dict(reference_source="def reference(): pass", device=None, calibration=None, history=[], failures=[])
    static, dyn = build_prompt_parts(PromptContext(task, best=best, bound=bound, **common))
    # the bound pattern is the run's: in the static part every call shares (prompt-cached)
    assert "already adapted to its signature" in static and "a0001 passed the gate at 123" in static
    assert (static + dyn).count("// the bound kernel") == 1
    # a crossover with it names it, never repeats it
    static, dyn = build_prompt_parts(PromptContext(task, best=best, bound=bound, crossover=(best, bound), **common))
    assert (static + dyn).count("// the bound kernel") == 1 and "its source is under The expert pattern" in dyn
    static, dyn = build_prompt_parts(PromptContext(task, best=best, **common))
    assert "already adapted to its signature" not in static + dyn


def test_a_model_run_gates_the_bound_pattern_first_and_offers_it_as_second_parent(tmp_path, monkeypatch):
    import kernel_forge.app.run_setup as run_setup

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plain = dataclasses.replace(load_task(MANIFEST), templates=())      # no elementwise pattern of its own
    monkeypatch.setattr(run_setup, "load_task", lambda *a, **k: plain)
    proposer = ScriptedProposer([[vector_add("pass 500")]])
    opt = start_run(MANIFEST, LoopConfig(archive="off", candidates=1, max_iterations=1), GateOptions(),
                    ProposerConfig(), runs_dir=tmp_path / "runs", gate=ScriptedGate(plain), proposer=proposer)
    opt.run()
    bound = [a for a in opt.state.attempts if a.proposer == "bound"]
    assert len(bound) == 1 and bound[0].status == "passed" and bound[0].label == "gate:bound_elementwise.cu"
    [request] = proposer.requests
    # it is no faster than the best on any case (the scripted gate times both at 600 us): a second
    # parent with nothing to give is not offered (issue 32); it still stands in the prompt
    assert [s.second_parent for s in request.slots] == [None]
    assert "already adapted to its signature" in request.full_prompt(0)
    assert f"{bound[0].id} passed the gate at" in request.full_prompt(0)


def _tuner_run(tmp_path, monkeypatch, iterations=3):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = ROOT / "tests" / "data" / "kinds" / "llmc_softmax.json"
    task = load_task(path)
    opt = start_run(path, LoopConfig(archive="off", candidates=1, max_iterations=iterations, tune_budget=3,
                                     refine=False), GateOptions(), ProposerConfig(), runs_dir=tmp_path / "runs",
                    gate=ScriptedGate(task))
    opt.run()
    return [a for a in opt.state.attempts if a.proposer == "tune"]


def test_without_a_model_the_tuner_gates_the_bound_pattern_then_searches_its_settings(tmp_path, monkeypatch):
    tuned = _tuner_run(tmp_path, monkeypatch)
    gate, rest = tuned[0], tuned[1:]
    assert gate.label == "gate:bound_row_softmax.cu" and gate.status == "passed" and gate.iteration == 1
    assert rest and {a.label for a in rest} == {"bound_row_softmax.cu"} and all(a.iteration > 1 for a in rest)
    assert all(set(a.defines) == {"WPR", "RPB", "ITEMS", "STREAM"} for a in rest)


def test_a_binding_that_fails_the_gate_is_dropped_with_its_verdict(tmp_path, monkeypatch):
    import kernel_forge.search.tuner as tuner

    real = tuner.gate_source
    monkeypatch.setattr(tuner, "gate_source", lambda s: real(s) + '// fake: mismatch 100\n#define FAKE_SCRIPT "bad"\n')
    tuned = _tuner_run(tmp_path, monkeypatch)
    assert [(a.label, a.status, a.reason) for a in tuned] == [("gate:bound_row_softmax.cu", "failed", "mismatch")]


@pytest.mark.parametrize("name", ["cs_boxfilter_y", "llmc_bias_backward", "cs_transpose"])
def test_with_every_default_a_bound_pattern_s_settings_are_searched_after_its_gate(tmp_path, monkeypatch, name):
    """The gate copy (tunables pinned) and the template share one kernel body; whichever the run
    met first, the space is the template's: on the H100 the wild box filter, bias gradient and
    transpose (bench/wild) stopped "exhausted" after the gate, their settings never searched."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = ROOT / "bench" / "wild" / name / f"{name}.json"      # the corpus kernel, its naive initial kernel
    task = load_task(path)
    opt = start_run(path, LoopConfig(archive="off", max_iterations=3, roof_stop=0), GateOptions(), ProposerConfig(),
                    runs_dir=tmp_path / "runs", gate=ScriptedGate(task))
    opt.run()
    gate = [a for a in opt.state.attempts if a.label.startswith("gate:bound_")]
    assert len(gate) == 1 and gate[0].status == "passed"
    searched = [a for a in opt.state.attempts if a.label == gate[0].label[len("gate:"):]]
    assert searched and all(a.status == "passed" for a in searched), [(a.defines, a.reason) for a in searched]
    settings = {tuple(sorted(a.defines.items())) for a in searched + gate}
    assert len(settings) == len(searched) + 1 >= 3
    line = opt.spaces.line(opt.state.attempts)
    assert "gate:" not in line and gate[0].label[len("gate:"):] + ":" in line
