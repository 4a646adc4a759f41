"""A task without an initial kernel: the first proposals translate the reference, and the first
translation that passes the gate and the holdout becomes the baseline (CPU, scripted gate)."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.common.errors import InputError
from kernel_forge.evidence.run_dir import RunDir, schema, validate_file
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.reports.heatmap import matrix
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import first_prompt, resume_run, start_run
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add, write_proposals
from tests.support.task_folders import no_initial

ROOT = Path(__file__).resolve().parents[2]


def run(tmp_path, sources, *, gate=None, proposer=None, **loop):
    m = no_initial(tmp_path / "task")
    task = load_task(m)
    props = write_proposals(tmp_path / "props", sources) if sources is not None else None
    loop.setdefault("archive", "off")
    loop.setdefault("candidates", 1)       # one proposal an iteration: the tests count iterations
    opt = start_run(m, LoopConfig(**loop), GateOptions(), ProposerConfig(replay=str(props)) if props else ProposerConfig(),
                    runs_dir=tmp_path / "runs", gate=gate or ScriptedGate(task), proposer=proposer)
    return opt, opt.run()


def read(opt, name):
    return json.loads((opt.run_dir.path / name).read_text())


def test_the_first_passing_translation_becomes_the_baseline_and_the_evidence_says_so(tmp_path):
    opt, summary = run(tmp_path, [vector_add("compile_error 0"), vector_add("mismatch 100"), vector_add("pass 500"),
                                  vector_add("pass 300")], max_iterations=8)
    hist = read(opt, "history.json")
    a = {x["id"]: x for x in hist["attempts"]}
    assert [x["proposer"] for x in hist["attempts"]] == ["replay"] * 4        # no initial attempt
    assert a["a0002"]["baseline"] is True and a["a0002"]["best"] is True
    assert a["a0002"]["holdout"]["passed"] is True and "baseline" in a["a0002"]["message"]
    assert not any(a[i].get("baseline") for i in ("a0000", "a0001", "a0003"))
    assert summary["initial"] == {"id": "a0002", "score_us": pytest.approx(500.0), "origin": "translation",
                                  "proposer": "replay", "source_file": "attempts/a0002.cu",
                                  "note": summary["initial"]["note"]}
    assert summary["best"]["id"] == "a0003" and summary["best"]["speedup_vs_initial"] == pytest.approx(500 / 300)
    run_json = read(opt, "run.json")
    assert run_json["baseline"] == "translation" and run_json["hashes"]["initial"] is None
    assert run_json["generated"] is None and summary["generated"] is None
    for f in RunDir(opt.run_dir.path).json_files():
        validate_file(f)
    report = (opt.run_dir.path / "report.md").read_text()
    assert "**baseline a0002**" in report and "not against a hand-written kernel" in report
    assert "vs the baseline a0002 (a translation)" in report
    assert 'c[i] = a[i] + b[i];' in report[report.index("baseline a0002 source"):]      # its source is shown
    assert "![heatmap.png](heatmap.png)" in report and (opt.run_dir.path / "heatmap.png").is_file()


def test_a_translation_that_fails_the_holdout_is_not_the_baseline(tmp_path):
    opt, summary = run(tmp_path, [vector_add("pass 400", holdout="fail"), vector_add("pass 450")], max_iterations=4)
    a = read(opt, "history.json")["attempts"]
    assert (a[0]["status"], a[0]["reason"], a[0].get("baseline", False)) == ("failed", "holdout_failed", False)
    assert a[1]["baseline"] is True and summary["initial"]["id"] == "a0001"


def test_the_rest_of_the_baseline_iteration_competes_with_it(tmp_path):
    gate_task = load_task(no_initial(tmp_path / "g"))
    proposer = ScriptedProposer([[vector_add("pass 500"), vector_add("pass 250")]])
    opt, summary = run(tmp_path, None, gate=ScriptedGate(gate_task), proposer=proposer, max_iterations=3, candidates=2)
    assert summary["initial"]["id"] == "a0000" and summary["best"]["id"] == "a0001"
    assert summary["best"]["retimed"]["best_id"] == "a0000"


def test_without_a_passing_translation_there_is_no_baseline_and_optimize_exits_1(tmp_path):
    m = no_initial(tmp_path / "task")
    props = write_proposals(tmp_path / "props", [vector_add("mismatch 100"), vector_add("compile_error 0")])
    import kernel_forge.app.run_setup as optimize_mod
    real = optimize_mod.make_gate
    optimize_mod.make_gate = lambda task, opts: ScriptedGate(task)
    try:
        r = CliRunner().invoke(cli, ["optimize", str(m), "--replay", str(props), "--runs-dir", str(tmp_path / "runs"),
                                     "--archive", "off"])
    finally:
        optimize_mod.make_gate = real
    assert r.exit_code == 1, r.output
    assert "no baseline" in r.output and "--resume" in r.output
    summary = json.loads((tmp_path / "runs" / "run-001" / "summary.json").read_text())
    assert summary["initial"] is None and summary["best"] is None
    jsonschema.validate(summary, schema("summary.schema.json"))
    assert "**no baseline**" in (tmp_path / "runs" / "run-001" / "report.md").read_text()


def test_the_translation_prompt_holds_the_reference_signature_launch_and_the_failures(tmp_path):
    proposer = ScriptedProposer([[vector_add("compile_error 0")], [vector_add("pass 500")], [vector_add("pass 400")]])
    gate_task = load_task(no_initial(tmp_path / "g"))
    run(tmp_path, None, gate=ScriptedGate(gate_task), proposer=proposer, max_iterations=3)
    first, second, third = proposer.requests
    for req in (first, second):
        full = req.full_prompt(0)
        assert "translate the reference" in full and "np.add(a.astype(np.float32" in full
        assert 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)' in full
        assert "default launch: grid [cdiv(n, 256)], block [256]" in full
        assert "3145745" not in full                    # the holdout's size is never shown
    assert [s.direction for s in first.slots] == ["a direct translation: one thread per output element, as the reference reads"]
    assert "Fix this failed attempt: a0000" in second.prompt_for(0) and "identifier \"nope\" is undefined" in second.prompt_for(0)
    assert "translate the reference" not in third.full_prompt(0) and "# Current best: a0001" in third.prompt_for(0)


def test_a_run_killed_in_the_translation_phase_resumes_with_its_baseline(tmp_path):
    m = no_initial(tmp_path / "task")
    task = load_task(m)
    props = write_proposals(tmp_path / "props", [vector_add("mismatch 100"), vector_add("pass 500"),
                                                 vector_add("pass 300")])
    gate = ScriptedGate(task, interrupt={"retime": 1})
    opt = start_run(m, LoopConfig(max_iterations=6, archive="off"), GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=tmp_path / "runs", gate=gate)
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    again = resume_run(opt.run_dir.path, gate=ScriptedGate(task))
    summary = again.run()
    assert again.state.initial.id == "a0001" and summary["initial"]["origin"] == "translation"
    assert summary["best"]["id"] == "a0002"


def test_the_tuner_without_an_initial_kernel_takes_its_first_passing_template_setting(tmp_path):
    m = no_initial(tmp_path / "task", templates=True)
    task = load_task(m)
    opt = start_run(m, LoopConfig(max_iterations=1, archive="off", tune_budget=4, refine=False), GateOptions(),
                    ProposerConfig(), runs_dir=tmp_path / "runs", gate=ScriptedGate(task))
    summary = opt.run()
    first = read(opt, "history.json")["attempts"][0]
    assert summary["initial"]["id"] == first["id"] == "a0000" and summary["initial"]["origin"] == "template"
    assert "template vector_add_gridstride.cu" in summary["initial"]["note"]
    assert read(opt, "run.json")["baseline"] == "template"


def test_the_tuner_refuses_a_task_with_neither_an_initial_kernel_nor_templates(tmp_path):
    m = no_initial(tmp_path / "task")
    with pytest.raises(InputError, match="nothing to start from"):
        start_run(m, LoopConfig(), GateOptions(), ProposerConfig(), runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_dry_run_prints_the_translation_prompt_and_eval_needs_a_kernel(tmp_path):
    m = no_initial(tmp_path / "task")
    system, user = first_prompt(m)
    assert "translate the reference" in user and "np.add" in user
    r = CliRunner().invoke(cli, ["eval", str(m)])
    assert r.exit_code == 2 and "no initial kernel" in r.output and "KERNEL" in r.output


# ------------------------------------------------------------------------------ the heatmap

def test_the_heatmap_matrix_marks_speedups_failures_and_the_holdout(tmp_path):
    opt, summary = run(tmp_path, [vector_add("compile_error 0"), vector_add("pass 500"), vector_add("mismatch 100"),
                                  vector_add("pass 250", holdout="fail")], max_iterations=6)
    attempts = read(opt, "history.json")["attempts"]
    rows, columns, cells = matrix(summary, attempts)
    assert [r["id"] for r in rows] == ["a0000", "a0001", "a0002", "a0003"]
    assert columns == [("odd", "correctness"), ("tiny", "correctness"), ("n16M", "performance"),
                       ("n64M", "performance"), ("holdout", "holdout")]
    compile_row, base_row, wrong_row, hidden_row = cells
    assert all(kind == "fail" for kind, _ in compile_row[:4]) and compile_row[4] == ("none", None)
    assert base_row[:2] == [("pass", None)] * 2 and base_row[4] == ("pass", None)
    assert base_row[2] == ("speedup", pytest.approx(1.0)) and base_row[3] == ("speedup", pytest.approx(1.0))
    assert wrong_row[0] == ("fail", "mismatch") and wrong_row[2] == ("speedup", pytest.approx(5.0))
    assert hidden_row[2] == ("speedup", pytest.approx(2.0)) and hidden_row[4] == ("fail", "holdout")


def test_the_heatmap_of_a_run_with_an_initial_kernel_counts_its_holdout_cases(tmp_path):
    task = load_task(ROOT / "manifests" / "vector_add.json")
    props = write_proposals(tmp_path / "props", [vector_add("pass 300")])
    opt = start_run(ROOT / "manifests" / "vector_add.json", LoopConfig(max_iterations=2, archive="off"), GateOptions(),
                    ProposerConfig(replay=str(props)), runs_dir=tmp_path / "runs", gate=ScriptedGate(task))
    summary = opt.run()
    rows, columns, cells = matrix(summary, read(opt, "history.json")["attempts"])
    assert rows[0]["id"] == "a0000" and cells[0][-1] == ("pass", None)
    assert cells[1][2] == ("speedup", pytest.approx(2.0))
    r = CliRunner().invoke(cli, ["report", str(opt.run_dir.path)])
    assert r.exit_code == 0 and "heatmap.png" in r.output


# ------------------------------------------------------------------------------ approve and the CI gate

def test_approve_copies_the_baseline_and_the_ci_gate_times_the_kernel_against_it(tmp_path):
    from kernel_forge.ci.regression import approve_run, run_regression

    opt, summary = run(tmp_path, [vector_add("pass 600"), vector_add("pass 300")], max_iterations=4)
    ap, dest = tmp_path / "approved.json", tmp_path / "approved"
    entry = approve_run(opt.run_dir.path, ap, dest, 0.05)
    assert entry["speedup_vs_initial"] == pytest.approx(2.0)
    base = dest / "vector_add.baseline.cu"
    assert base.read_text() == (opt.run_dir.path / "attempts" / "a0000.cu").read_text()
    assert entry["baseline"] == "approved/vector_add.baseline.cu"
    timed = []

    class Recording(ScriptedGate):
        def retime(self, candidates, rounds=2):
            timed.append([c.name for c in candidates])
            return super().retime(candidates, rounds)

    rows = run_regression(ap, GateOptions(), gate_factory=lambda task, o: Recording(task))
    assert rows[0]["ok"] and rows[0]["speedup"] == pytest.approx(2.0), rows[0]["detail"]
    assert timed == [[str(base.resolve()), str((dest / "vector_add.cu").resolve())]]
    base.write_text("// changed\n" + base.read_text())
    rows = run_regression(ap, GateOptions(), gate_factory=lambda task, o: Recording(task))
    assert not rows[0]["ok"] and "approved baseline is missing or changed" in rows[0]["detail"]


def test_approve_refuses_a_run_whose_best_is_its_baseline(tmp_path):
    from kernel_forge.ci.regression import approve_run

    opt, summary = run(tmp_path, [vector_add("pass 600")], max_iterations=2)
    with pytest.raises(InputError, match="the run's baseline .* nothing to approve"):
        approve_run(opt.run_dir.path, tmp_path / "a.json", tmp_path / "k", 0.05)
    assert not (tmp_path / "a.json").exists()
