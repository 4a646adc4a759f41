"""A kernel with a dispatch rule through the gate, the loop and the commands that replay it, on
the CPU: every case (holdout included) runs with the setting the rule picks, and the evidence,
replay, approve and the CI gate say which."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.ci import evaluate
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.app.cli import cli
from kernel_forge.model.dispatch import Rule
from kernel_forge.common.errors import InputError
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import start_run
from kernel_forge.ci.regression import approve_run, run_regression
from kernel_forge.model.task import load_task
from kernel_forge.model.verdict import CaseResult
from kernel_forge.model.worker_protocol import resolve_launch

from tests.support.dispatch_kernels import HEADER, TEMPLATE
from tests.support.fakes import EARLY, ScriptedGate, vector_add, write_proposals

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"      # odd 1000003, tiny 37, n16M, n64M, holdout 3145745
TASK = load_task(MANIFEST)

RULE = """// kforge: dispatch n >= 33554432 -> BLOCK=1024
// kforge: dispatch default -> BLOCK=128
"""


def rule_kernel(fake: str = "pass 400", extra: str = "") -> str:
    return vector_add(fake, header=HEADER + RULE + extra)


def picked(ev) -> dict[str, int]:
    return {c.name: c.variant["branch"] for c in ev.cases}


# ------------------------------------------------------------------------------ the split and merge

def test_each_case_runs_with_the_setting_its_rule_picks_holdout_included():
    gate = ScriptedGate(TASK)
    cand = parse_candidate(rule_kernel(), name="rule.cu")
    ev = gate.evaluate(cand, roles=("correctness", "performance", "holdout"))
    assert ev.passed, ev.message
    assert [c.name for c in ev.cases] == ["odd", "tiny", "n16M", "n64M", "holdout"]     # the task's order
    assert picked(ev) == {"odd": 1, "tiny": 1, "n16M": 1, "n64M": 0, "holdout": 1}
    # the launch each case recorded was resolved with its own setting
    assert {c.name: c.launch["block"][0] for c in ev.cases} == {"odd": 128, "tiny": 128, "n16M": 128,
                                                                "n64M": 1024, "holdout": 128}
    assert ev.case("n64M").variant == {"branch": 0, "when": "n >= 33554432", "defines": {"BLOCK": 1024}}
    # one sub-evaluation per setting, on exactly the cases the rule gives it
    runs = [c for c in gate.calls if c[0] == "variant"]
    assert [(r[2], r[3]) for r in runs] == [(("holdout", "n16M", "odd", "tiny"), {"BLOCK": 128}),
                                            (("n64M",), {"BLOCK": 1024})]
    assert ev.dispatch == cand.dispatch.to_json() and ev.defines == {"BLOCK": 128}
    assert ev.sha256 == cand.sha256 and ev.label == "rule.cu"
    perf = [ev.case("n16M").timing.median, ev.case("n64M").timing.median]
    assert ev.score_us == pytest.approx((perf[0] * perf[1]) ** 0.5)
    assert [v["defines"] for v in ev.compile["variants"]] == [{"BLOCK": 128}, {"BLOCK": 1024}]
    assert ev.compile["variants"][0]["branches"] == [1] and ev.compile["variants"][1]["branches"] == [0]


def test_the_hidden_cases_alone_run_with_the_rules_pick():
    gate = ScriptedGate(TASK)
    ev = gate.evaluate(parse_candidate(rule_kernel(), name="rule.cu"), roles=("holdout",))
    assert ev.passed and picked(ev) == {"holdout": 1}
    assert [(c[2], c[3]) for c in gate.calls if c[0] == "variant"] == [(("holdout",), {"BLOCK": 128})]


def test_a_rule_whose_setting_is_faster_per_case_scores_better_than_either_setting():
    src = rule_kernel(extra="") + "// fake-opt: BLOCK=128\n// fake-opt@n64M: BLOCK=1024\n"
    gate = ScriptedGate(TASK)
    rule = gate.evaluate(parse_candidate(src, name="rule.cu"))
    plain = src.replace(RULE, "")
    small = gate.evaluate(parse_candidate(plain, name="p.cu").with_defines({"BLOCK": 128}))
    big = gate.evaluate(parse_candidate(plain, name="p.cu").with_defines({"BLOCK": 1024}))
    assert rule.case("n16M").timing.median == small.case("n16M").timing.median
    assert rule.case("n64M").timing.median == big.case("n64M").timing.median
    assert rule.score_us < min(small.score_us, big.score_us)


class FailsAt1024(ScriptedGate):
    """The BLOCK=1024 setting fails: ``mode`` "mismatch" on its cases, or "compile_error" before them."""

    mode = "mismatch"

    def _evaluate(self, cand, roles, *, kind="candidate", only=None):
        if cand.dispatch is None and cand.defines.get("BLOCK") == 1024:
            cand = replace(cand, source=cand.source.replace("// fake: pass 400", f"// fake: {self.mode} 400"))
        return super()._evaluate(cand, roles, kind=kind, only=only)


def test_a_case_that_fails_under_its_setting_fails_the_kernel_naming_the_dispatch_line():
    gate = FailsAt1024(TASK)
    src = rule_kernel()
    ev = gate.evaluate(parse_candidate(src, name="rule.cu"), roles=("correctness", "performance", "holdout"))
    assert not ev.passed and ev.reason == "mismatch"
    assert ev.message.startswith("case n64M (dispatch line `n >= 33554432 -> BLOCK=1024`): ")
    assert {c.name: c.passed for c in ev.cases} == {"odd": True, "tiny": True, "n16M": True, "n64M": False,
                                                    "holdout": True}
    assert ev.score_us is None


def test_a_setting_that_does_not_compile_fails_the_kernel_and_says_which_line():
    gate = FailsAt1024(TASK)
    gate.mode = "compile_error"
    ev = gate.evaluate(parse_candidate(rule_kernel(), name="rule.cu"))
    assert not ev.passed and ev.reason == "compile_error"
    assert ev.message.startswith("dispatch line `n >= 33554432 -> BLOCK=1024`: ")
    assert "n64M" not in [c.name for c in ev.cases]           # its only case never ran
    assert "nope" in ev.compile["log"] and len(ev.compile["variants"]) == 2
    assert "compile_error" in EARLY


def test_a_rule_that_cannot_run_on_the_task_is_bad_without_running_anything():
    gate = ScriptedGate(TASK)
    src = vector_add("pass 400", header=HEADER + "// kforge: dispatch n > 1 << 40 -> BLOCK=1024\n"
                                                 "// kforge: dispatch default -> BLOCK=128\n")
    ev = gate.evaluate(parse_candidate(src, name="rule.cu"))
    assert not ev.passed and ev.reason == "bad_candidate"
    assert ev.message.startswith("rule.cu:4: no case of task vector_add takes the dispatch line")
    assert not [c for c in gate.calls if c[0] == "variant"]


def test_side_by_side_retiming_runs_each_case_with_its_setting():
    gate = ScriptedGate(TASK)
    cand = parse_candidate(rule_kernel(), name="rule.cu")
    init = parse_candidate(vector_add(), name="init.cu")
    a, b = gate.retime([init, cand], rounds=2)
    assert a.passed and b.passed
    assert picked(b) == {"n16M": 1, "n64M": 0} and len(b.case("n64M").timing.samples_us) == 2 * gate.reps


class NoGpuGate(Gate):
    """The real Gate with NVRTC compiling for sm_90 and the worker replaced: each run records the
    compiled kernel's defines and cases, and passes."""

    def __init__(self, task):
        super().__init__(task, GateOptions(arch="sm_90"))
        self.runs: list[tuple[dict, tuple[str, ...]]] = []

    def _run_cases(self, spec, ev, roles, time_cases, only, cost):
        cases = [c for c in self.task.cases if c.role in roles and (only is None or c.name in only)]
        self.runs.append((dict(spec.defines), tuple(c.name for c in cases)))
        assert spec.cubin
        for c in cases:
            launch = resolve_launch(spec.launch, c.vars, spec.defines)
            ev.cases.append(CaseResult(c.name, c.role, True, launch=launch.to_json()))
        ev.passed, ev.reason = True, "passed"


def test_the_real_gate_compiles_each_setting_ahead_and_runs_each_on_its_cases():
    gate = NoGpuGate(TASK)
    try:
        cand = parse_candidate(rule_kernel(), name="rule.cu")
        gate.precompile([cand])
        assert len(gate._compiles) == 2                     # one compile per setting, started ahead
        ev = gate.evaluate(cand, roles=("correctness", "performance", "holdout"))
        assert ev.passed, ev.message
        assert gate.runs == [({"BLOCK": 128}, ("odd", "tiny", "n16M", "holdout")), ({"BLOCK": 1024}, ("n64M",))]
        assert not gate._compiles                           # both were taken from the precompiled ones
        assert picked(ev) == {"odd": 1, "tiny": 1, "n16M": 1, "n64M": 0, "holdout": 1}
        assert ev.case("n64M").launch["block"] == [1024, 1, 1] and ev.case("n16M").launch["block"] == [128, 1, 1]
        assert all(v["compile"]["cubin_bytes"] > 0 for v in ev.compile["variants"])
    finally:
        gate.close()


# ------------------------------------------------------------------------------ the loop

def tuned_run(tmp_path, **loop):
    props = write_proposals(tmp_path / "props", {"template.cu": TEMPLATE})
    config = LoopConfig(max_iterations=1, tune_budget=8, **loop)
    opt = start_run(MANIFEST, config, GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=tmp_path / "runs", gate=ScriptedGate(TASK))
    opt.run()
    return opt


def test_after_a_tuned_proposal_the_loop_gates_the_fitted_rule_and_it_becomes_best(tmp_path):
    opt = tuned_run(tmp_path)
    rules = [a for a in opt.state.attempts if a.dispatch]
    assert len(rules) == 1
    r = rules[0]
    assert Rule.from_json(r.dispatch).describe() == "n >= 33554432 -> BLOCK=1024; default -> BLOCK=128"
    assert r.label == "template.cu+dispatch" and r.direction.startswith("settings per shape")
    assert r.status == "passed" and r.best and opt.state.best is r
    assert r.retimed and r.holdout["passed"] and r.holdout["variants"] == {"holdout": 1}
    single = [a for a in opt.state.attempts if a.label == "template.cu" and a.status == "passed"]
    assert len(single) == 4 and r.score_us < min(a.score_us for a in single)
    assert r.parent == min(single, key=lambda a: a.score_us).id
    ev = r.evaluation
    assert {c["name"]: c["variant"]["branch"] for c in ev["cases"]} == {"odd": 1, "tiny": 1, "n16M": 1, "n64M": 0}


def test_the_rule_is_in_the_evidence_and_best_cu_replays_it(tmp_path):
    opt = tuned_run(tmp_path)
    run = opt.run_dir.path
    best = (run / "best.cu").read_text()
    assert "// kforge: dispatch n >= 33554432 -> BLOCK=1024\n// kforge: dispatch default -> BLOCK=128" in best
    assert parse_candidate(best, name="best.cu").dispatch.to_json() == opt.state.best.dispatch
    big = json.loads((run / "best-case-n64M.json").read_text())
    small = json.loads((run / "best-case-n16M.json").read_text())
    assert big["defines"] == {"BLOCK": 1024} and big["variant"]["branch"] == 0
    assert small["defines"] == {"BLOCK": 128} and small["variant"]["when"] == "default"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"]["dispatch"] == opt.state.best.dispatch
    assert {r["case"]: r["variant"]["branch"] for r in summary["best"]["per_case"]} == {"n16M": 1, "n64M": 0}
    report = (run / "report.md").read_text()
    assert "### Settings per shape (dispatch rule in best.cu)" in report
    assert "1. `n >= 33554432` -> BLOCK=1024" in report and "2. `default` -> BLOCK=128" in report
    assert "| n64M |" in report and "| 1: n >= 33554432 |" in report
    assert "hidden (holdout) cases ran with line holdout: 2" in report
    rd = RunDir.open(run)                       # every file still reads back against its schema
    for name in ("history.json", "summary.json", "best-case-n64M.json", "run.json"):
        rd.read_json(name)


def test_no_rule_is_proposed_with_dispatch_off_or_when_one_setting_suffices(tmp_path):
    off = tuned_run(tmp_path / "off", dispatch=False)
    assert not [a for a in off.state.attempts if a.dispatch]
    props = write_proposals(tmp_path / "props", {"t.cu": vector_add("pass 400", header=HEADER)})
    opt = start_run(MANIFEST, LoopConfig(max_iterations=1, tune_budget=8), GateOptions(),
                    ProposerConfig(replay=str(props)), runs_dir=tmp_path / "runs", gate=ScriptedGate(TASK))
    opt.run()
    assert not [a for a in opt.state.attempts if a.dispatch]
    assert opt.state.best.defines == {"BLOCK": 256} and "dispatch" not in (opt.run_dir.path / "best.cu").read_text()


def test_a_run_killed_while_gating_the_rule_resumes_without_proposing_it_twice(tmp_path):
    props = write_proposals(tmp_path / "props", {"template.cu": TEMPLATE})
    # evaluate calls: initial 1, four settings 2-5, the rule 6 (killed there)
    gate = ScriptedGate(TASK, interrupt={"evaluate": 6})
    config = LoopConfig(max_iterations=1, tune_budget=8)
    opt = start_run(MANIFEST, config, GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=tmp_path / "runs", gate=gate)
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    hist = json.loads((opt.run_dir.path / "history.json").read_text())
    assert [a["status"] for a in hist["attempts"] if a.get("dispatch")] == ["pending"]
    from kernel_forge.app.run_setup import resume_run
    again = resume_run(opt.run_dir.path, gate=ScriptedGate(TASK))
    again.run()
    rules = [a for a in again.state.attempts if a.dispatch]
    assert len(rules) == 1 and rules[0].status == "passed" and again.state.best is rules[0]


# ------------------------------------------------------------------------------ replay, approve, CI gate

@pytest.fixture
def finished(tmp_path):
    return tuned_run(tmp_path).run_dir.path


def _kforge(monkeypatch, gate_cls=ScriptedGate):
    monkeypatch.setattr(evaluate, "default_gate", lambda task, options: gate_cls(task))
    runner = CliRunner()
    return lambda *a: runner.invoke(cli, [str(x) for x in a], catch_exceptions=False)


def test_replay_runs_the_setting_the_case_was_recorded_with(finished, monkeypatch, tmp_path):
    kforge = _kforge(monkeypatch)
    r = kforge("replay", finished / "best-case-n64M.json", "--json", tmp_path / "r.json")
    assert r.exit_code == 0, r.output
    assert "variant: line 1 `n >= 33554432` -> BLOCK=1024 (as recorded)" in r.output
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["ok"] and result["variant"] == result["variant_recorded"]
    assert result["evaluation"]["cases"][0]["launch"]["block"] == [1024, 1, 1]


def test_replay_says_so_when_the_rule_no_longer_picks_the_recorded_setting(finished, monkeypatch):
    req = json.loads((finished / "best-case-n64M.json").read_text())
    req["variant"] = {"branch": 1, "when": "default", "defines": {"BLOCK": 128}}
    (finished / "best-case-n64M.json").write_text(json.dumps(req))
    r = _kforge(monkeypatch)("replay", finished / "best-case-n64M.json")
    assert r.exit_code == 1, r.output
    assert "ran line 1 `n >= 33554432` -> BLOCK=1024, but the case was recorded with line 2 `default` -> BLOCK=128" \
        in r.output


def test_approve_keeps_the_rule_and_the_ci_gate_runs_each_case_with_it(finished, tmp_path, monkeypatch):
    ap = tmp_path / "approved.json"
    entry = approve_run(finished, ap, tmp_path / "approved", 0.05)
    assert Rule.from_json(entry["dispatch"]).describe() == "n >= 33554432 -> BLOCK=1024; default -> BLOCK=128"
    copy = (tmp_path / "approved" / "vector_add.cu").read_text()
    assert "// kforge: dispatch n >= 33554432 -> BLOCK=1024" in copy
    rows = run_regression(ap, GateOptions(), gate_factory=lambda task, options: ScriptedGate(task))
    assert rows[0]["ok"], rows[0]["detail"]
    assert rows[0]["variants"] == {"odd": 1, "tiny": 1, "n16M": 1, "n64M": 0, "holdout": 1}
    # the same through the commands
    kforge = _kforge(monkeypatch)
    r = kforge("gate", ap, "--junit", tmp_path / "kforge.xml")
    assert r.exit_code == 0 and "PASS vector_add" in r.output, r.output
    import xml.etree.ElementTree as ET
    out = {tc.get("name"): tc.findtext("system-out") or "" for tc in ET.parse(tmp_path / "kforge.xml").iter("testcase")}
    assert "dispatch line 1 (n >= 33554432): BLOCK=1024" in out["n64M"]
    assert "dispatch line 2 (default): BLOCK=128" in out["n16M"]


def test_approve_prints_the_rule(finished, tmp_path, monkeypatch):
    r = _kforge(monkeypatch)("approve", finished, "--into", tmp_path / "a.json", "--copy-to", tmp_path / "approved")
    assert r.exit_code == 0, r.output
    assert "with its dispatch rule: n >= 33554432 -> BLOCK=1024; default -> BLOCK=128" in r.output


def test_approve_refuses_a_best_cu_whose_rule_is_not_the_one_gated(finished, tmp_path):
    best = finished / "best.cu"
    best.write_text(best.read_text().replace("n >= 33554432 -> BLOCK=1024", "n >= 1000000 -> BLOCK=1024"))
    with pytest.raises(InputError) as err:
        approve_run(finished, tmp_path / "approved.json", tmp_path / "approved", 0.05)
    assert "best.cu: its dispatch rule differs from the one the run gated (n >= 33554432 -> BLOCK=1024; " \
           "default -> BLOCK=128)" in str(err.value)
    assert not (tmp_path / "approved.json").exists()


def test_the_ci_gate_fails_a_rule_whose_large_setting_went_wrong(finished, tmp_path):
    ap = tmp_path / "approved.json"
    approve_run(finished, ap, tmp_path / "approved", 0.05)
    rows = run_regression(ap, GateOptions(), gate_factory=lambda task, options: FailsAt1024(task))
    assert not rows[0]["ok"] and rows[0]["verdict"] == "mismatch"
    assert "case n64M (dispatch line `n >= 33554432 -> BLOCK=1024`)" in rows[0]["detail"]


# ------------------------------------------------------------------------------ eval and MCP

def test_kforge_eval_shows_the_line_each_case_ran_with(tmp_path, monkeypatch):
    path = tmp_path / "rule.cu"
    path.write_text(rule_kernel())
    r = _kforge(monkeypatch)("eval", MANIFEST, path, "--json", tmp_path / "e.json")
    assert r.exit_code == 0, r.output
    assert "dispatch rule (first line whose condition holds): 1. n >= 33554432 -> BLOCK=1024; 2. default -> " \
           "BLOCK=128" in r.output
    row = next(l for l in r.output.splitlines() if l.startswith("n64M"))
    assert row.rstrip().endswith("1: n >= 33554432")
    data = json.loads((tmp_path / "e.json").read_text())
    assert data["dispatch"][0]["defines"] == {"BLOCK": 1024}
    assert {c["name"]: c["variant"]["branch"] for c in data["cases"]}["n64M"] == 0


def test_the_mcp_eval_kernel_tool_honours_a_rule_in_the_source(tmp_path):
    from kernel_forge.app.mcp_server import Service
    service = Service(tmp_path / "runs", gate_factory=lambda task, options: ScriptedGate(task), gate_label="test")
    answer = service.eval_kernel(str(MANIFEST), source=rule_kernel(), baselines=False)
    assert answer["passed"], answer["message"]
    assert answer["dispatch"][0] == {"when": "n >= 33554432", "defines": {"BLOCK": 1024}}
    assert {c["name"]: (c["variant"] or {}).get("branch") for c in answer["cases"]} == {
        "odd": 1, "tiny": 1, "n16M": 1, "n64M": 0, "holdout": 1}
