"""Where a run folder keeps its history, and the history read back as it was recorded: the
attempt log ``history.jsonl`` folded (a process that was killed left it), else ``history.json``.

This is the one fold of the log: :func:`kernel_forge.evidence.history_log.read_history` adds the
schema check for the commands, and a recorded gate (:mod:`kernel_forge.gate.recorded`) reads its
verdicts from the same fold.
"""
from __future__ import annotations

from pathlib import Path

from kernel_forge.common.errors import InputError
from kernel_forge.common.patch_log import read_log
from kernel_forge.common.reads import MAX_RECORD, Unreadable, read_json_file

#: the history written whole, when a process of the run ends
HISTORY = "history.json"
#: the history as an append-only log, while a process of the run works
LOG = "history.jsonl"


def fold_log(log: Path) -> dict | None:
    """The history an attempt log holds (its lines folded, a torn last line dropped); None when
    the log holds none, or was removed as its process finished (history.json is whole then).
    A damaged log is an InputError naming it and its line."""
    try:
        return read_log(log, "attempt log").document
    except Unreadable:
        if log.exists():
            raise
        return None


def recorded_history(run_path: str | Path) -> dict:
    """The run's history as recorded, unchecked: its log folded when a process left one, else
    history.json; an InputError naming the file when neither is a JSON object."""
    path = Path(run_path)
    folded = fold_log(path / LOG) if (path / LOG).is_file() else None
    if folded is not None:
        return folded
    hist = read_json_file(path / HISTORY, "run history", limit=MAX_RECORD)
    if not isinstance(hist, dict):
        raise InputError(f"{path / HISTORY}: $: expected an object, got {type(hist).__name__}")
    return hist
