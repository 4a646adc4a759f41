"""Tests of kernel_forge/evidence/run_dir.py: a run's folder and its evidence files, written and read."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from kernel_forge.common.errors import InputError, InternalError
from kernel_forge.evidence.run_dir import RunDir, numbered_dir, read_evidence, schema

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "matmul_f32" / "run-001"


def test_a_new_folder_is_numbered_after_the_highest_one_of_its_prefix(tmp_path):
    assert numbered_dir(tmp_path / "runs", "run") == tmp_path / "runs" / "run-001"     # the root is created
    for name in ("run-007", "run-012", "run-99", "run-abc", "batch-099"):   # NNN: three digits at least
        (tmp_path / "runs" / name).mkdir()
    made = numbered_dir(tmp_path / "runs", "run")
    assert made.name == "run-013" and made.is_dir()
    assert made.stat().st_mode & 0o777 == 0o700
    assert numbered_dir(tmp_path / "runs", "batch").name == "batch-100"


def test_a_created_run_has_an_attempts_folder_and_open_refuses_a_folder_without_run_json(tmp_path):
    run = RunDir.create(tmp_path)
    assert run.path == tmp_path / "run-001" and (run.path / "attempts").is_dir()
    assert run.path.stat().st_mode & 0o777 == 0o700
    with pytest.raises(InputError) as err:
        RunDir.open(run.path)
    assert err.value.message == f"{run.path} is not a kforge run folder (no run.json)"
    assert err.value.hint == "pass a folder like runs/run-007"
    (run.path / "run.json").write_text("{}")
    assert RunDir.open(run.path).path == run.path


@dataclass
class Point:
    x: int


def test_json_is_written_scrubbed_of_api_keys_and_with_paths_sets_and_numpy_values_made_plain(tmp_path, monkeypatch):
    monkeypatch.setenv("ACME_API_KEY", "sk-acme-0123456789abcdef")
    run = RunDir(tmp_path)
    target = run.write_json("notes.json", {"said": "the key is sk-acme-0123456789abcdef", "where": Path("/a/b"),
                                           "tags": {"x"}, "pair": (1, 2), "point": Point(3), "n": np.int64(7)})
    text = target.read_text()
    assert "sk-acme-0123456789abcdef" not in text and text.endswith("\n")
    back = json.loads(text)
    assert (back["where"], back["tags"], back["pair"], back["point"], back["n"]) == ("/a/b", ["x"], [1, 2], {"x": 3}, 7)
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_nan_is_never_written_and_the_error_names_where_it_was(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(InternalError) as err:
        run.write_json("summary.json", {"best": {"cases": [{"median": 1.0}, {"median": float("nan")}]}})
    assert f"{tmp_path / 'summary.json'}: kforge was about to write nan at $.best.cases[1].median" in str(err.value)
    assert not (tmp_path / "summary.json").exists()
    with pytest.raises(InternalError, match=r"about to write inf at \$\.t"):
        run.append_line("log.jsonl", {"t": float("inf")})
    assert not (tmp_path / "log.jsonl").exists()


def test_lines_are_appended_and_the_first_one_replaces_the_file(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "log.jsonl").write_text("old content\n")
    first = run.append_line("log.jsonl", {"a": 1}, first=True)
    second = run.append_line("log.jsonl", {"b": [2]})
    lines = (tmp_path / "log.jsonl").read_bytes().splitlines(keepends=True)
    assert [json.loads(l) for l in lines] == [{"a": 1}, {"b": [2]}]
    assert (first, second) == (len(lines[0]), len(lines[1]))


def test_model_calls_are_numbered_and_listed_with_the_schema_files(tmp_path):
    run = RunDir(tmp_path)
    assert run.next_model_index() == 1
    for name in ("model-002.json", "model-010.json", "summary.json", "run.json", "best-case-odd.json", "notes.json"):
        (tmp_path / name).write_text("{}")
    assert run.next_model_index() == 11
    assert [p.name for p in run.json_files()] == ["run.json", "summary.json", "model-002.json", "model-010.json",
                                                  "best-case-odd.json"]


def test_a_damaged_or_wrong_evidence_file_is_an_input_error_naming_the_file_and_place(tmp_path):
    shutil.copy(SHIPPED / "summary.json", tmp_path / "summary.json")
    assert read_evidence(tmp_path / "summary.json") == json.loads((SHIPPED / "summary.json").read_text())
    summary = json.loads((tmp_path / "summary.json").read_text())
    summary["iterations"] = "many"
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(InputError) as err:
        RunDir(tmp_path).read_json("summary.json")
    assert str(err.value) == (f"{tmp_path / 'summary.json'}: $.iterations: 'many' is not of type 'integer' "
                              "(the file does not match summary.schema.json)")
    assert RunDir(tmp_path).read_json("summary.json", check=False)["iterations"] == "many"
    (tmp_path / "history.json").write_text('{"attempts": [\n  {"id": "a0000",\n}')
    with pytest.raises(InputError) as err:
        RunDir(tmp_path).read_json("history.json")
    assert err.value.message.startswith(f"{tmp_path / 'history.json'}: damaged JSON at line 3, column 1:")
    assert RunDir(tmp_path).read_json("env.json", default={"absent": True}) == {"absent": True}


def test_a_schema_that_refers_to_another_file_carries_it_in_its_defs():
    log = schema("history_log.schema.json")
    assert log["$defs"]["history.schema.json"] == schema("history.schema.json")
    # so a validator resolves the reference without a registry: an attempt is checked as history.json's are
    attempt = json.loads((SHIPPED / "history.json").read_text())["attempts"][0]
    validator = jsonschema.Draft202012Validator(log)
    assert validator.is_valid({"attempts": [attempt]})
    assert not validator.is_valid({"attempts": [{**attempt, "status": "ok"}]})
