"""Tests of kernel_forge/app/cli_batch.py: `kforge batch`, its options and what it hands to run_batch."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_forge.app import batch as batch_module
from kernel_forge.app.cli_batch import RESERVED, batch_options
from kernel_forge.config.gate_settings import QUICK

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"


def _refused(r) -> str:
    assert r.exit_code == 2, f"exit {r.exit_code}:\n{r.output}{r.stderr}"
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r.stderr


@pytest.fixture
def handed(monkeypatch):
    """What batch hands to run_batch (which runs nothing here); its record says one task ended as ``ended``."""
    seen = {}

    def run_batch(manifests, **kw):
        seen.update(kw, manifests=manifests)
        kw["progress"]("[batch] (test) started")
        return {"batch": "batch-001", "results": {"vector_add": {"stop_reason": seen.get("ended", "max_iterations")}}}
    monkeypatch.setattr(batch_module, "run_batch", run_batch)
    monkeypatch.setattr(batch_module, "table", lambda record: f"table of {sorted(record['results'])}")
    return seen


def test_batch_takes_every_optimize_option_and_refuses_the_same_values(kforge, tmp_path):
    """Batch's options are generated from the same declaration as optimize's: --max-iterations -1
    is a bad input (exit 2) before anything runs, as in optimize, not an environment error."""
    from kernel_forge.app.cli_batch import batch_options
    from kernel_forge.app.cli_run import optimize_options

    assert {o.decls for o in batch_options()} == {o.decls for o in optimize_options()}
    m = MANIFEST                             # refused before anything reads it
    said = [_refused(kforge(cmd, m, "--max-iterations", "-1", "--runs-dir", tmp_path / "runs")) for cmd in
            ("optimize", "batch")]
    assert said[0] == said[1] == "kforge: error: --max-iterations -1: must be at least 1, got -1\n"
    assert not (tmp_path / "runs").exists()


def test_batch_resume_takes_no_options(kforge, tmp_path):
    r = kforge("batch", "--resume", tmp_path, "--max-iterations", "3", "--quick")
    assert r.exit_code == 2 and "(not --max-iterations, --quick)" in r.stderr


def test_the_batch_s_own_options_are_not_run_settings():
    flags = {d for o in batch_options() for decl in o.decls for d in decl.split("/")}
    assert not flags & RESERVED
    assert {"--max-iterations", "--reps", "--model"} <= flags


def test_quick_lies_under_the_gate_options_typed_and_each_section_reaches_run_batch(kforge, handed, tmp_path):
    r = kforge("batch", MANIFEST, "--quick", "--extra-draws", "2", "--max-iterations", "3", "--model", "openai:gpt-5",
               "--ray", "--retries", "0", "--runs-dir", tmp_path)
    assert r.exit_code == 0, r.output
    assert r.stdout == "table of ['vector_add']\n" and "[batch] (test) started" in r.stderr
    assert handed["manifests"] == [str(MANIFEST)]
    assert handed["gate"] == {**QUICK, "extra_draws": 2}
    assert handed["loop"] == {"max_iterations": 3} and handed["proposer"] == {"models": ["openai:gpt-5"]}
    assert (handed["ray_address"], handed["retries"], handed["resume"], handed["runs_dir"]) == ("local", 0, None,
                                                                                               str(tmp_path))


def test_json_prints_the_record_and_a_task_that_ended_in_error_fails_the_batch(kforge, handed, tmp_path):
    handed["ended"] = "error"
    r = kforge("batch", MANIFEST, "--json", "--runs-dir", tmp_path)
    assert r.exit_code == 1
    assert json.loads(r.stdout) == {"batch": "batch-001", "results": {"vector_add": {"stop_reason": "error"}}}


def test_resume_takes_no_manifest_and_retries_are_never_negative(kforge, handed, tmp_path):
    assert "--resume takes the batch's own manifests; give no MANIFEST with it" in _refused(
        kforge("batch", MANIFEST, "--resume", tmp_path))
    assert "--retries must be >= 0, got -1" in _refused(kforge("batch", MANIFEST, "--retries", "-1"))
    assert handed == {}                                  # nothing was run
