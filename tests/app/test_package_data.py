"""The run folders shipped under tests/data are read with today's schemas: a schema change that
leaves them behind fails here, not in a user's ``kforge report`` (``run-matmul_f32`` lacked fields
of run.json and history.json, and had no summary, so ``report`` and ``--resume`` refused it).
Regenerate them with ``python tests/data/make_recorded_run.py``."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.evidence.run_dir import SCHEMA_FOR, RunDir, read_evidence

DATA = Path(__file__).resolve().parents[1] / "data"
RUNS = sorted(p.parent for p in DATA.rglob("run.json"))


def test_there_is_shipped_run_data_to_check():
    assert [str(p.relative_to(DATA)) for p in RUNS] == ["matmul_f32/run-001"]


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_every_json_file_of_a_shipped_run_matches_todays_schemas(run):
    files = RunDir(run).json_files()
    assert {f.name for f in files} >= set(SCHEMA_FOR) - {"manifest.json", "retrieval.json"}
    for f in files:
        read_evidence(f)                      # raises naming the file and JSON path


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_a_shipped_run_can_be_reported_again(run, tmp_path):
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    r = CliRunner().invoke(cli, ["report", str(copy)])
    assert r.exit_code == 0, r.output + (r.stderr or "")
    assert (copy / "report.md").read_text().startswith(f"# kforge run {run.name}")


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_a_shipped_runs_best_is_the_kernel_its_history_measured(run):
    import hashlib

    summary, history = read_evidence(run / "summary.json"), read_evidence(run / "history.json")
    best = next(a for a in history["attempts"] if a["id"] == summary["best"]["id"])
    assert hashlib.sha256((run / "best.cu").read_bytes()).hexdigest() == best["sha256"]
