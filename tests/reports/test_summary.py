"""summary.json and report.md open with the diagnosis of the best and name every slower case (CPU)."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from kernel_forge.evidence.run_dir import RunDir, schema
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import start_run
from kernel_forge.gate.profiler import save_profile
from kernel_forge.reports.run_report import write_report
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate, vector_add, write_proposals

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"
NCU_ROW = {"kernel": "vector_add", "grid": "(65536, 1, 1)", "block": "(256, 1, 1)", "time_us": 70.0, "dram_pct": 88.5,
           "l2_pct": 60.1, "sm_pct": 20.2, "achieved_occupancy_pct": 81.0, "theoretical_occupancy_pct": 100.0,
           "registers": 16.0, "waves": 3.9, "occupancy_limits": {}, "launches_profiled": 2,
           "stalls": [{"reason": "long_scoreboard", "per_issue": 30.0, "share": 0.8}]}


def _run(tmp_path, sources, **loop):
    task = load_task(MANIFEST)
    props = write_proposals(tmp_path / "props", sources)
    opt = start_run(MANIFEST, LoopConfig(**loop), GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=tmp_path / "runs", gate=ScriptedGate(task, baseline_us=250.0))
    return opt, opt.run()


def test_summary_has_the_diagnosis_and_the_slower_cases(tmp_path):
    opt, summary = _run(tmp_path, [vector_add("pass 400")], max_iterations=3)
    jsonschema.validate(summary, schema("summary.schema.json"))
    best = summary["best"]
    assert best["id"] == "a0001" and best["speedup_vs_initial"] > 1
    # the scripted baseline takes 250 µs where the best takes 400: every timed case is slower
    cases = [c.name for c in load_task(MANIFEST).cases_with("performance")]
    assert [(s["case"], s["than"]) for s in best["slower_than"]] == [(c, "cupy_add") for c in cases]
    assert all(abs(s["ratio"] - 250 / 400) < 1e-9 for s in best["slower_than"])
    d = summary["diagnosis"]
    assert [c["name"] for c in d["cases"]] == cases
    assert d["peak"]["key"] == "fp32" and d["ridge"] > 0
    assert {c["bound"] for c in d["cases"]} <= {"memory", "latency"}
    assert all(c["resources_source"] == "computed" for c in d["cases"])          # from the scripted ptxas registers
    report = (opt.run_dir.path / "report.md").read_text()
    head = report[:report.index("### Per case")]
    assert "### Diagnosis" in head and "| case | median µs | bound |" in head
    assert "; **slower on** " in head and "x0.62 vs " in head


def test_a_run_without_a_faster_kernel_still_validates(tmp_path):
    _, summary = _run(tmp_path, [vector_add("mismatch 100")], max_iterations=2)
    jsonschema.validate(summary, schema("summary.schema.json"))
    assert summary["best"]["id"] == "a0000" and summary["diagnosis"]["cases"]


def test_report_summarises_the_profiles_of_the_bests(tmp_path):
    opt, summary = _run(tmp_path, [vector_add("pass 400")], max_iterations=2)
    run = RunDir(opt.run_dir.path)
    case = load_task(MANIFEST).cases_with("performance")[0].name
    save_profile(run, "a0001", {"available": True, "reason": "", "tool": "ncu", "seconds": 4.0,
                                "cases": {case: NCU_ROW}, "raw": "\"ID\",\n"})
    save_profile(run, "a0000", {"available": False, "reason": "==ERROR== ERR_NVGPUCTRPERM", "tool": "ncu",
                                "seconds": 1.0, "cases": {}})
    hist = json.loads((run.path / "history.json").read_text())
    write_report(run, summary, hist["attempts"])
    report = (run.path / "report.md").read_text()
    prof = report[report.index("## Profiles (Nsight Compute)"):]
    assert "2 profile(s), 5.0 s in all (2.5 s each" in prof
    assert f"| a0001 (best) | {case} | 70.0 | 88.5 | 60.1 | 20.2 | 81.0 | long_scoreboard 80% |" in prof
    assert "| a0000 (best) | - | - | - | - | - | - | not available: ==ERROR== ERR_NVGPUCTRPERM |" in prof
    assert prof.index("a0000") < prof.index("a0001")
    # the summary written after the profile was saved carries its lines in the diagnosis
    from kernel_forge.reports.summary import build_summary
    again = build_summary(opt.state, opt.task, opt.run_dir, proposer=opt.proposer.name,
                          search=opt.search_summary(), gate=opt.gate)
    c = next(x for x in again["diagnosis"]["cases"] if x["name"] == case)
    assert c["profile"]["dram_pct"] == 88.5 and again["diagnosis"]["profile_status"]["available"] is True
