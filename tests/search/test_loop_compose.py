"""Features of separate branches used together (CPU): the translation phase with the model
proposers' answer format and a harness fault, a cooperative launch in the answer's JSON part and
under a dispatch rule, a tuned translation whose fitted rule is gated against it with the report's
heatmap, rule and cost sections, and a resumed run that keeps the proposer settings of issue 18."""
from __future__ import annotations

import json

import pytest

from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.dispatch_variants import variants
from kernel_forge.evidence.run_dir import RunDir, validate_file
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.search.proposal_candidate import LaunchConflict, candidate_from_proposal
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import resume_run, start_run
from kernel_forge.proposers.answer import read_answer
from kernel_forge.proposers.base import Proposal, ProposalResult
from kernel_forge.proposers.proposal_schema import check_proposal, to_proposal
from kernel_forge.ci.regression import approve_run, run_regression
from kernel_forge.model.task import load_task

from tests.support import fake_gpu
from tests.support.dispatch_kernels import TEMPLATE
from tests.support.fakes import ScriptedGate, ScriptedProposer, model_call, vector_add
from tests.support.in_process_gate import SOURCE, honest, in_process_gate, kernel_fn, vector_add_task
from tests.support.loop_runs import KEYS, MANIFEST, SPECS, model_proposer, prompt_of, read
from tests.support.loopback import text, tool
from tests.support.task_folders import no_initial


@pytest.fixture
def gate(tmp_path, monkeypatch):
    """The real gate over a small vector_add with the worker's code in this process (fake GPU)."""
    yield from in_process_gate(vector_add_task(tmp_path), monkeypatch)


# ------------------------------------------------------------------ translation x answer format x harness_error

@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_translation_fix_turn_may_answer_with_edits_and_a_harness_error_is_never_shown_as_a_failure(
        tmp_path, loopback, clean_env, provider):
    """A failed translation's fix turn carries it as the parent, so SEARCH/REPLACE edits against it
    apply; a translation the harness itself failed on is neither shown as a failure nor fixed."""
    harness, broken = vector_add("harness_error 100"), vector_add("compile_error 0")
    edits = ("The macro was misspelt.\n\n```diff\n<<<<<<< SEARCH\n// fake: compile_error 0\n"
             '#define FAKE_SCRIPT "compile_error 0"\n=======\n// fake: pass 500\n#define FAKE_SCRIPT "pass 500"\n'
             ">>>>>>> REPLACE\n```\n")
    loopback.script(provider, tool({"source": harness, "rationale": "direct"}),
                    tool({"source": broken, "rationale": "direct"}), text(edits))
    m = no_initial(tmp_path / "task")
    opt = start_run(m, LoopConfig(max_iterations=3, candidates=1, archive="off"), GateOptions(),
                    ProposerConfig(models=[SPECS[provider]]), runs_dir=tmp_path / "runs",
                    gate=ScriptedGate(load_task(m)), proposer=model_proposer(provider, loopback))
    summary = opt.run()
    hist = read(opt.run_dir, "history.json")["attempts"]
    assert [(a["id"], a["reason"], a["fix_of"]) for a in hist] == [
        ("a0000", "harness_error", None), ("a0001", "compile_error", None), ("a0002", "passed", "a0001")]
    first, second, third = (prompt_of(provider, r.body) for r in loopback.requests(provider))
    assert "a0000" not in second and "a0000" not in third          # kernel_forge's fault, not the kernel's
    assert "Fix this failed attempt: a0001" in third
    fixed = (opt.run_dir.path / hist[2]["source_file"]).read_text()
    assert fixed.rstrip() == broken.replace("compile_error 0", "pass 500").rstrip()   # the edits, applied
    assert summary["initial"]["id"] == "a0002" and summary["initial"]["origin"] == "translation"
    for f in RunDir(opt.run_dir.path).json_files():
        validate_file(f)


# ------------------------------------------------------------------ cooperative x answer format x dispatch

COOP = SOURCE.replace("// kforge: grid = [cdiv(n, 256)]", "// kforge: grid = [GRID]\n// kforge: cooperative = true"
                      "\n// kforge: tune GRID = [64, 128, 2000]")


def test_a_cooperative_launch_in_the_answers_json_part_reaches_the_candidate():
    body = SOURCE.split("\n", 3)[3]               # the kernel without its header
    answer = ("Grid-wide sync.\n\n```cuda\n" + body + "```\n\n```json\n"
              + json.dumps({"launch": {"grid": [64], "block": [256], "cooperative": True}}) + "\n```\n")
    got = read_answer(answer)
    assert got.problem is None and check_proposal(got.args) is None
    proposal = to_proposal(got.args, proposer="m")
    assert proposal.launch["cooperative"] is True
    cand = candidate_from_proposal(proposal, "a0001.cu")
    assert cand.launch.cooperative and "// kforge: cooperative = true" in cand.render()
    # a header that launches plainly and a JSON part that asks for a cooperative launch disagree
    plain = Proposal(source=SOURCE.replace("cdiv(n, 256)", "64"),
                     launch={"grid": [64], "block": [256], "shared_mem": 0, "cooperative": True})
    with pytest.raises(LaunchConflict, match="cooperative"):
        candidate_from_proposal(plain, "a0002.cu")
    # a JSON part that does not mention it leaves a cooperative header as it is
    header = Proposal(source=COOP.replace("GRID", "64").replace("\n// kforge: tune 64 = [64, 128, 2000]", ""),
                      launch={"grid": [64], "block": [256], "shared_mem": 0})
    assert candidate_from_proposal(header, "a0003.cu").launch.cooperative


def test_a_cooperative_kernel_with_a_dispatch_rule_runs_every_setting_cooperatively_and_checks_each_grid(gate):
    kernel_fn(honest)
    fits = parse_candidate(COOP + "// kforge: dispatch n >= 4096 -> GRID=128\n// kforge: dispatch default -> GRID=64\n",
                           name="coop.cu")
    assert all(v.launch.cooperative for v in variants([fits]))
    again = parse_candidate(fits.render(), name="coop.cu")
    assert again.launch.cooperative and again.dispatch.to_json() == fits.dispatch.to_json()
    ev = gate.evaluate(fits)
    assert ev.passed, ev.message
    assert fake_gpu.COOPERATIVE and all(fake_gpu.COOPERATIVE)
    assert {c.name: (c.launch["grid"][0], c.launch["cooperative"], c.variant["branch"]) for c in ev.cases} == {
        "odd": (64, True, 1), "perf": (128, True, 0)}
    # the fake GPU holds 8 blocks per SM on 132 SMs: the large case's setting cannot be co-resident
    fake_gpu.LAUNCHES.clear()
    too_big = parse_candidate(COOP + "// kforge: dispatch n >= 4096 -> GRID=2000\n// kforge: dispatch default -> GRID=64\n",
                              name="coop2.cu")
    bad = gate.evaluate(too_big)
    assert bad.reason == "launch_config" and "2000 blocks" in bad.message and "= 1056" in bad.message
    assert "n >= 4096" in bad.message                          # the line whose setting failed


# ------------------------------------------------------------------ translation x dispatch x heatmap x cost

def test_a_tuned_translation_is_the_baseline_its_fitted_rule_is_gated_against_it_and_the_report_has_every_section(
        tmp_path):
    m = no_initial(tmp_path / "task")
    answer = ProposalResult(proposals=[Proposal(source=TEMPLATE, calls=[0])],
                            calls=[model_call(1200, 800, 0.02)])
    opt = start_run(m, LoopConfig(max_iterations=1, tune_budget=8, archive="off"), GateOptions(),
                    ProposerConfig(models=["openai:scripted-model"]), runs_dir=tmp_path / "runs",
                    gate=ScriptedGate(load_task(m)), proposer=ScriptedProposer([answer], name="openai:scripted-model"))
    summary = opt.run()
    baseline = opt.state.initial
    assert baseline is not None and baseline.baseline and baseline.proposer == "openai:scripted-model"
    rule = next(a for a in opt.state.attempts if a.dispatch)
    assert rule.status == "passed" and opt.state.best is rule and rule.retimed and rule.holdout["passed"]
    assert summary["initial"]["origin"] == "translation" and summary["best"]["dispatch"] == rule.dispatch
    assert summary["best"]["speedup_vs_initial"] > 1
    run = opt.run_dir.path
    report = (run / "report.md").read_text()
    assert f"**baseline {baseline.id}**" in report
    assert "### Settings per shape (dispatch rule in best.cu)" in report
    assert "![heatmap.png](heatmap.png)" in report and (run / "heatmap.png").is_file()
    assert "## Model cost" in report and "openai:scripted-model" in report
    assert "// kforge: dispatch" in (run / "best.cu").read_text()
    for f in RunDir(run).json_files():
        validate_file(f)
    # approved with its rule and its baseline; the CI gate runs each case with its line against that baseline
    ap, dest = tmp_path / "approved.json", tmp_path / "approved"
    entry = approve_run(run, ap, dest, 0.05)
    assert entry["dispatch"] == rule.dispatch and entry["baseline"] == "approved/vector_add.baseline.cu"
    assert (dest / "vector_add.baseline.cu").read_text() == (run / baseline.source_file).read_text()
    rows = run_regression(ap, GateOptions(), gate_factory=lambda task, options: ScriptedGate(task))
    assert rows[0]["ok"], rows[0]["detail"]
    assert rows[0]["variants"] == {"odd": 1, "tiny": 1, "n16M": 1, "n64M": 0, "holdout": 1}
    assert rows[0]["speedup"] == pytest.approx(summary["best"]["speedup_vs_initial"], rel=0.05)


# ------------------------------------------------------------------ resume x issue 18's proposer settings

def test_a_resumed_run_asks_its_model_with_the_settings_it_started_with(tmp_path, loopback, clean_env, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEYS["anthropic"])
    loopback.script("anthropic", tool({"source": vector_add("pass 400"), "rationale": "a"}),
                    tool({"source": vector_add("pass 300"), "rationale": "b"}))
    task = load_task(MANIFEST)
    prop = ProposerConfig(models=[SPECS["anthropic"]], base_url=loopback.anthropic_base_url, answer_format="tool",
                          cache_ttl="long", reasoning_effort="medium", request_timeout_s=5)
    opt = start_run(MANIFEST, LoopConfig(max_iterations=2, candidates=1, archive="off", budget_usd=5.0),
                    GateOptions(), prop, runs_dir=tmp_path / "runs",
                    gate=ScriptedGate(task, interrupt={"retime": 1}))
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    again = resume_run(opt.run_dir.path, gate=ScriptedGate(task))
    member = again.proposer.members[0]
    assert (member.answer_format, member.cache_ttl, member.effort) == ("tool", "long", "medium")
    assert member.budget is not None and member.budget.spent > 0          # what the first part spent counts
    again.run()
    first, second = (r.body for r in loopback.requests("anthropic"))
    for body in (first, second):                                           # the same request, before and after
        assert body["tools"][0]["name"] == "submit_kernel" and body["tool_choice"]["type"] == "auto"
        assert body["output_config"] == {"effort": "medium"}
        assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    hist = read(again.run_dir, "history.json")
    assert [a["reason"] for a in hist["attempts"]] == ["passed", "passed", "passed"]
