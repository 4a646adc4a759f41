"""With a model, the pattern of the task's kind bound to its signature is gated once at the start
and goes into the prompt as a kernel already adapted to the signature, with its gated time, and
as a second parent (scripted gate and model, no GPU, no network)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from kernel_forge.config.gate import GateOptions
from kernel_forge.config.loop import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import start_run
from kernel_forge.model.task import load_task
from kernel_forge.search.prompts import PromptAttempt, build_prompt_parts

from fakes import ScriptedGate, ScriptedProposer, vector_add

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"


def _attempt(id_, source, us):
    return PromptAttempt(id=id_, source=source, passed=True, reason="passed", message="", score_us=us)


def test_the_prompt_shows_the_bound_pattern_with_its_time_once():
    task = load_task(MANIFEST)
    best = _attempt("a0000", vector_add(), 600.0)
    bound = _attempt("a0001", "// the bound kernel\n" + vector_add(variant="bound"), 123.4)
    common = dict(reference_source="def reference(): pass", device=None, calibration=None, history=[], failures=[])
    _, dyn = build_prompt_parts(task, best=best, bound=bound, **common)
    assert "already adapted to its signature" in dyn and "a0001 passed the gate at 123" in dyn
    assert dyn.count("// the bound kernel") == 1
    # shown as a crossover parent already: referred to, not repeated
    _, dyn = build_prompt_parts(task, best=best, bound=bound, crossover=(best, bound), **common)
    assert dyn.count("// the bound kernel") == 1 and "Its source is under Combine" in dyn
    _, dyn = build_prompt_parts(task, best=best, **common)
    assert "already adapted to its signature" not in dyn


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
    assert request.seconds == [bound[0].id]
    assert "already adapted to its signature" in request.full_prompt(0)
    assert f"{bound[0].id} passed the gate at" in request.full_prompt(0)
