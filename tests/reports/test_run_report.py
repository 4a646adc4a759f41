"""kernel_forge.reports.run_report: report.md of a run folder -- the run's figures, where its baseline came
from, the best with its settings per shape and per-case table, the cost section, the plots and every attempt."""
from __future__ import annotations

import copy
import json

import pytest

from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.reports import run_report
from kernel_forge.reports.run_report import write_report

ROW = {"case": "n16M", "median_us": 50.0, "p10_us": 49.0, "p90_us": 51.5, "gbps": 4012.34, "tflops": None,
       "pct_peak_bw": 83.33, "pct_peak_flops": None, "speedup_vs_initial": 2.0, "speedup_vs_baselines": {"cupy": 1.25}}
SUMMARY = {
    "run": "run-007", "task": "vector_add", "stop_reason": "max_iterations", "iterations": 2, "gated": 3, "passed": 2,
    "rejected": {"mismatch": 1, "compile_error": 2}, "wall_seconds": 12.34, "candidates_per_minute": 9.7,
    "tokens": {"input": 1000, "output": 200}, "cost_usd": 0.0123, "baselines": {"cupy": {"score_us": 62.5}},
    "initial": {"id": "a0000", "origin": "task", "score_us": 100.0},
    "best": {"id": "a0002", "proposer": "replay", "label": "02.cu", "score_us": 50.0, "speedup_vs_initial": 2.0,
             "speedup_vs_baselines": {"cupy": 1.25}, "holdout": {"passed": True}, "per_case": [ROW],
             "slower_than": []},
}
ATTEMPTS = [
    {"id": "a0000", "iteration": 0, "proposer": "initial", "label": "vector_add.cu", "status": "passed",
     "score_us": 100.0, "defines": {}},
    {"id": "a0001", "iteration": 1, "proposer": "replay", "label": "01.cu", "status": "failed", "reason": "mismatch",
     "defines": {}},
    {"id": "a0002", "iteration": 1, "proposer": "replay", "label": "02.cu", "status": "passed", "score_us": 50.0,
     "defines": {"ITEMS": 4, "BLOCK": 256}, "best": True},
]


def report(tmp_path, summary=SUMMARY, attempts=ATTEMPTS) -> str:
    write_report(RunDir(tmp_path), summary, attempts)
    return (tmp_path / "report.md").read_text()


@pytest.fixture
def no_plots(monkeypatch):
    """The report without its pictures (they have a test of their own)."""
    monkeypatch.setattr(run_report, "_plots", lambda run_dir, summary, attempts: [])


def test_the_report_opens_with_the_run_s_figures_and_ends_with_every_attempt(tmp_path, no_plots):
    text = report(tmp_path)
    assert text.startswith("# kforge run run-007: vector_add\n\n"
                           "- stop reason: **max_iterations** after 2 iteration(s)\n"
                           "- attempts gated: 3 (2 passed); rejected by reason: compile_error 2, mismatch 1\n"
                           "- wall time 12.3 s (9.7 candidates/min)\n"
                           "- tokens in/out 1000/200, cost $0.0123\n")
    table = text[text.index("## Attempts"):]
    assert "| a0001 | 1 | replay | 01.cu |  | mismatch | - |" in table
    assert "| a0002 | 1 | replay | 02.cu | BLOCK=256 ITEMS=4 | pass (best) | 50.00 |" in table
    assert table.rstrip().endswith("re-run the whole evaluation: `kforge eval MANIFEST <run>/best.cu`.")
    assert "## Model cost" not in text and "![" not in text
    assert "**baseline" not in text                  # the task's own initial kernel needs no word on its origin


def test_the_best_is_measured_against_the_initial_kernel_and_each_baseline_with_its_per_case_row(tmp_path, no_plots):
    text = report(tmp_path)
    assert "## Best: a0002 (replay 02.cu)\n\nscore 50.00 µs, x2.00 vs the initial kernel, x1.25 vs cupy; " \
           "hidden (holdout) cases with fresh inputs: passed\n" in text
    assert "| n16M | 50.00 | 49.00-51.50 | 4012.3 | - | 83.3 | - | 2.00 |" in text
    assert " variant |" not in text                              # no dispatch rule: no variant column


@pytest.mark.parametrize("holdout, said", [
    (None, "not run (the initial kernel is still the best)"),
    ({"passed": False, "reason": "mismatch"}, "FAILED (mismatch)"),
])
def test_the_best_s_holdout_is_said_not_run_or_failed_with_its_reason(tmp_path, no_plots, holdout, said):
    summary = copy.deepcopy(SUMMARY)
    summary["best"]["holdout"] = holdout
    summary["best"]["slower_than"] = [{"case": "n16M", "ratio": 0.8, "than": "cupy"}]
    text = report(tmp_path, summary)
    assert f"x1.25 vs cupy; **slower on** n16M (x0.80 vs cupy); hidden (holdout) cases with fresh inputs: {said}" in text


def test_a_dispatch_rule_is_listed_line_by_line_and_each_case_names_the_line_it_ran_with(tmp_path, no_plots):
    summary = copy.deepcopy(SUMMARY)
    best = summary["best"]
    best["dispatch"] = [{"when": "n >= 4096", "defines": {"ITEMS": 4, "BLOCK": 512}}, {"when": "", "defines": {"BLOCK": 128}}]
    best["holdout"] = {"passed": True, "variants": {"holdout_b": 0, "holdout_a": 1}}
    best["per_case"] = [{**ROW, "variant": {"branch": 0, "when": "n >= 4096"}}, {**ROW, "case": "odd", "variant": None}]
    text = report(tmp_path, summary)
    assert ("### Settings per shape (dispatch rule in best.cu)\n\n"
            "Each case runs with the first line whose condition holds for its variables:\n\n"
            "1. `n >= 4096` -> BLOCK=512, ITEMS=4\n2. `default` -> BLOCK=128\n\n"
            "hidden (holdout) cases ran with line holdout_a: 2, holdout_b: 1\n") in text
    assert "| x initial | variant |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |" in text
    assert "| 2.00 | 1: n >= 4096 |" in text and "| odd | 50.00 |" in text and "| 2.00 | - |" in text


def test_a_model_written_baseline_is_named_with_its_source_and_a_run_without_one_says_nothing_was_measured(
        tmp_path, no_plots):
    summary = copy.deepcopy(SUMMARY)
    summary["initial"] = {"id": "a0001", "origin": "translation", "score_us": 12.5, "note": "the first translation "
                          "that passed", "source_file": "attempts/a0001.cu"}
    (tmp_path / "attempts").mkdir()
    (tmp_path / "attempts" / "a0001.cu").write_text("__global__ void k() {}\n\n")
    text = report(tmp_path, summary)
    assert ("- **baseline a0001** (12.50 µs): the first translation that passed; every speedup (\"x initial\") is "
            "measured against it, not against a hand-written kernel") in text
    assert ("<details><summary>baseline a0001 source (attempts/a0001.cu, model-written)</summary>\n\n"
            "```cuda\n__global__ void k() {}\n```\n\n</details>") in text
    assert "x2.00 vs the baseline a0001 (a translation)" in text
    nothing = dict(SUMMARY, initial=None, best=None)
    text = report(tmp_path, nothing, [])
    assert "- **no baseline**: no attempt passed the gate and the holdout, so nothing was measured against anything" \
        in text and "## Best" not in text


def test_the_cost_section_comes_from_the_run_s_model_calls(tmp_path, no_plots):
    (tmp_path / "model-001.json").write_text(json.dumps({"provider": "openai", "model": "m", "iteration": 1,
                                                         "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.5}))
    text = report(tmp_path)
    assert "## Model cost" in text and "| openai:m | 1 | 10 | 0 | 0 | 5 | 0 | 0.5000 |" in text
    assert text.index("### Per case") < text.index("## Model cost") < text.index("## Attempts")


def test_the_plots_are_written_into_the_run_and_shown_in_the_report(tmp_path):
    pytest.importorskip("matplotlib")
    text = report(tmp_path)          # no attempt has an evaluation: no heatmap
    assert "![progress.png](progress.png)\n\n![cases.png](cases.png)" in text and "heatmap" not in text
    for name in ("progress.png", "cases.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "heatmap.png").exists()
