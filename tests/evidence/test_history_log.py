"""A run's history (evidence/history_log.py): written as a log that starts whole and grows by the
changes, read back as history.json's content from the log when there is one, else from
history.json (every earlier release's runs and every finished one), checked against its schema."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.common.patch_log import read_log
from kernel_forge.evidence.history_log import HISTORY, LOG, HistoryLog, read_history
from kernel_forge.evidence.run_dir import RunDir

RECORDED = Path(__file__).resolve().parents[1] / "data" / "matmul_f32" / "run-001"


@pytest.fixture()
def recorded(tmp_path) -> RunDir:
    """A copy of the run recorded by an earlier release (history.json only)."""
    shutil.copytree(RECORDED, tmp_path / "run")
    return RunDir(tmp_path / "run")


def test_a_run_of_an_earlier_release_reads_from_history_json(recorded):
    assert not (recorded.path / LOG).exists()
    assert read_history(recorded) == json.loads((recorded.path / HISTORY).read_text())


def test_neither_file_gives_the_default(tmp_path):
    assert read_history(tmp_path, {"none": True}) == {"none": True}


def test_the_log_starts_with_the_whole_history_and_then_holds_only_what_changed(recorded):
    hist = read_history(recorded)
    log = HistoryLog(recorded)
    log.start(hist)
    changed = {**hist["attempts"][1], "message": "changed after the start"}
    n = log.append({"state": {**hist["state"], "iteration": 99}, "attempts": [changed]})
    assert n == log.bytes_written < 2 * len(json.dumps(changed)) + 1000
    got = read_history(recorded)                   # the log now, not history.json
    assert got["state"]["iteration"] == 99 and got["attempts"][1]["message"] == "changed after the start"
    assert [a["id"] for a in got["attempts"]] == [a["id"] for a in hist["attempts"]]
    assert read_log(recorded.path / LOG, "attempt log").lines == 2


def test_finishing_writes_history_json_whole_and_removes_the_log(recorded):
    hist = read_history(recorded)
    log = HistoryLog(recorded)
    log.start(hist)
    log.append({"state": {**hist["state"], "iteration": 42}})
    log.finish({**hist, "state": {**hist["state"], "iteration": 42}})
    assert not (recorded.path / LOG).exists()
    assert json.loads((recorded.path / HISTORY).read_text())["state"]["iteration"] == 42


def test_a_log_holding_only_a_torn_line_leaves_history_json_as_the_history(recorded):
    (recorded.path / LOG).write_bytes(b'{"task": "matmul_f32", "attem')
    assert read_history(recorded) == json.loads((recorded.path / HISTORY).read_text())


def test_the_logs_history_is_checked_against_history_schema_naming_the_log(recorded):
    hist = read_history(recorded)
    log = HistoryLog(recorded)
    log.start(hist)
    log.append({"attempts": [{**hist["attempts"][2], "status": "maybe"}]})
    with pytest.raises(InputError) as err:
        read_history(recorded)
    assert f"{recorded.path / LOG}: $.attempts[2].status" in str(err.value)
    assert "history.schema.json" in str(err.value)
    assert read_history(recorded, check=False)["attempts"][2]["status"] == "maybe"


def test_appending_before_starting_is_refused(recorded):
    with pytest.raises(Exception, match="appended to before it was started"):
        HistoryLog(recorded).append({"attempts": []})


def test_a_key_in_an_attempt_never_reaches_the_log(recorded, monkeypatch):
    key = "sk-local-key-that-matches-no-pattern"[::-1]
    monkeypatch.setenv("LOCAL_LLM_API_KEY", key)
    hist = read_history(recorded)
    log = HistoryLog(recorded)
    log.start({**hist, "attempts": [{**hist["attempts"][0], "message": f"401 for {key}"}]})
    log.append({"attempts": [{**hist["attempts"][1], "message": "Bearer abcdefghijklmnop and sk-ant-0123456789abcdefgh"}]})
    text = (recorded.path / LOG).read_text()
    assert key not in text and "abcdefghijklmnop" not in text and "sk-ant-0123456789" not in text
    assert text.count("[REDACTED]") == 3


def test_a_line_leaves_out_a_top_level_value_the_log_already_holds_and_folds_to_the_same_history(recorded):
    """The vendor baselines are timed once: a step's line carries them only when they changed, so a
    line's size is its step's, and the log still folds to every value last written."""
    hist = read_history(recorded)
    assert hist["baselines"], "the recorded run timed a vendor baseline"
    name, first = next(iter(hist["baselines"].items()))
    faster = {name: {**first, "score_us": first["score_us"] / 2}}
    log = HistoryLog(recorded)
    log.start(hist)
    log.append({"state": {**hist["state"], "iteration": 1}, "baselines": hist["baselines"], "attempts": []})
    log.append({"state": {**hist["state"], "iteration": 2}, "baselines": faster, "attempts": []})
    log.append({"state": {**hist["state"], "iteration": 3}, "baselines": json.loads(json.dumps(faster)),
                "attempts": []})
    lines = (recorded.path / LOG).read_text().splitlines()
    assert ["baselines" in json.loads(x) for x in lines] == [True, False, True, False]
    got = read_history(recorded)
    assert got["state"]["iteration"] == 3 and got["baselines"] == faster
    assert got["attempts"] == hist["attempts"]
