"""bench/wild_table.py without a GPU: the commands it runs (model-free, a time limit per kernel,
bounded in all), how it reads a run's summary.json, and the table it writes."""
from __future__ import annotations

import sys

import pytest

from tests.support.bench_scripts import bench_script


@pytest.fixture(scope="module")
def wt():
    return bench_script("wild_table")


def test_a_dry_run_lists_one_model_free_optimize_per_corpus_kernel_within_a_quarter_of_an_hour(wt, capsys):
    assert wt.main(["--dry-run", "--out", "/tmp/never-written"]) == 0
    out = capsys.readouterr().out.splitlines()
    head, commands = out[0], out[1:]
    assert len(commands) == len(wt.entries()) >= 12
    assert all(" optimize " in c and "--time-limit 30 " in c and "--archive off" in c and "--model" not in c
               for c in commands)
    minutes = float(head.split("about ")[1].split(" minutes")[0])
    assert 8 <= minutes <= 15          # 30 s and the final profile per kernel, the expert versions' gates
    with pytest.raises(SystemExit, match="no corpus kernel called nope"):
        wt.main(["--dry-run", "--only", "nope"])


def test_a_runs_summary_gives_the_best_the_initial_and_the_worst_cases_share_of_its_roof(wt, tmp_path, monkeypatch):
    fake = tmp_path / "fake_optimize.py"
    fake.write_text("""import json, sys, pathlib
runs = pathlib.Path(sys.argv[sys.argv.index('--runs-dir') + 1]); run = runs / 'run-001'; run.mkdir(parents=True)
print('[kforge] iteration 1: 25 gated')
(run / 'summary.json').write_text(json.dumps({'stop_reason': 'roof_stop: at roof', 'gated': 25,
  'initial': {'id': 'a0000', 'score_us': 400.0},
  'best': {'id': 'a0007', 'label': 'x.cu', 'speedup_vs_initial': 8.0, 'per_case': [
     {'case': 'a', 'median_us': 25.0, 'pct_peak_bw': 91.0, 'pct_peak_flops': 3.0},
     {'case': 'b', 'median_us': 100.0, 'pct_peak_bw': 84.0, 'pct_peak_flops': None}]}}))
""")
    monkeypatch.setattr(wt, "optimize_command", lambda d, runs, t: [sys.executable, str(fake), "--runs-dir", str(runs)])
    lines = []
    row = wt.run_optimize(wt.entries()[0], tmp_path / "runs", 5.0, lines.append)
    assert row["exit_code"] == 0 and row["best_us"] == pytest.approx(50.0) and row["initial_us"] == 400.0
    assert row["roof_pct"] == 84.0 and row["per_case"]["a"]["roof_pct"] == 91.0 and row["speedup"] == 8.0
    assert any("iteration 1: 25 gated" in x for x in lines)
    text = wt.table([{"name": "k1", "optimize": row, "expert": {"passed": True, "reason": "passed", "score_us": 75.0,
                                                              "per_case": {}, "roof_pct": 56.0}},
                     {"name": "k2", "optimize": row, "expert": None},
                     {"name": "k3", "optimize": {"error": "no summary.json (exit 2)"},
                      "expert": {"passed": False, "reason": "mismatch", "score_us": None, "per_case": {}, "roof_pct": None}}])
    assert "| k1 | 400.00 | 50.00 | 8.00 | 84.0 | roof_stop | 75.00 | 56.0 | 1.50× faster |" in text
    assert "| k2 | 400.00 | 50.00 | 8.00 | 84.0 | roof_stop | none | - | - |" in text
    assert "| k3 | - | - | - | - | no summary.json (exit 2) | fails: mismatch | - | - |" in text
