"""A run's history as recorded (records/history_file.py): the attempt log folded when a killed
process left one (it wins over an older history.json), else history.json; a file that is not a
history is an InputError naming it.  A recorded gate reads its verdicts from the same fold."""
from __future__ import annotations

import json

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.gate.recorded import RecordedGate
from kernel_forge.records.history_file import HISTORY, LOG, fold_log, recorded_history


def _line(obj) -> str:
    return json.dumps(obj) + "\n"


def test_the_log_of_a_killed_process_wins_over_an_older_history_json(tmp_path):
    (tmp_path / HISTORY).write_text(json.dumps({"attempts": [{"id": "a0000", "status": "pending"}]}))
    (tmp_path / LOG).write_text(_line({"attempts": [{"id": "a0000", "status": "pending"}], "baselines": {}})
                                + _line({"attempts": [{"id": "a0000", "status": "passed", "sha256": "ab",
                                                       "evaluation": {"label": "x", "passed": True}}]})
                                + '{"attempts": [{"id": "a0001"')          # torn by the kill: dropped
    hist = recorded_history(tmp_path)
    assert hist["attempts"] == [{"id": "a0000", "status": "passed", "sha256": "ab",
                                 "evaluation": {"label": "x", "passed": True}}]
    assert RecordedGate.from_run(tmp_path).verdicts == {"ab": {"label": "x", "passed": True}}


def test_without_a_log_the_history_is_history_json(tmp_path):
    (tmp_path / HISTORY).write_text(json.dumps({"attempts": [], "baselines": {"cublas": {"passed": True}}}))
    assert recorded_history(tmp_path) == {"attempts": [], "baselines": {"cublas": {"passed": True}}}


def test_a_history_json_that_is_not_an_object_is_named(tmp_path):
    (tmp_path / HISTORY).write_text("[1, 2]")
    with pytest.raises(InputError, match=r"history\.json: \$: expected an object, got list"):
        recorded_history(tmp_path)


def test_a_log_removed_as_its_process_finished_folds_to_nothing(tmp_path):
    assert fold_log(tmp_path / LOG) is None
