"""A run's history (every attempt and the loop's state) recorded at a cost per step that does not
grow with the run, and read back the same whichever way it was written.

While a process of the run works, the history is ``history.jsonl``, an append-only log
(:mod:`kernel_forge.common.patch_log`): the process starts it with the whole history as its first
line (written atomically, which also drops a line a kill tore), then appends one line per save
holding the state and only the attempts that changed, each line on disk before the loop goes on.
When the process ends (a stop rule, an error, Ctrl-C) it writes ``history.json`` whole, as every
release did, and removes the log.  So a finished run, and every run of an earlier release, has
``history.json`` only; a run killed hard has the log, and its history is the log's.

:func:`read_history` is the commands' reader: the log when there is one, else ``history.json``
(:mod:`kernel_forge.records.history_file` folds it), checked against ``history.schema.json`` either way.
"""
from __future__ import annotations

import json
from pathlib import Path

from kernel_forge.common.errors import InternalError
from kernel_forge.common.writes import remove_file
from kernel_forge.evidence.run_dir import RunDir, check_schema
from kernel_forge.records.history_file import HISTORY, LOG, fold_log


class HistoryLog:
    """The writer of one process's history: :meth:`start` once, :meth:`append` after each step,
    :meth:`finish` at the end."""

    def __init__(self, run: RunDir):
        self.run = run
        self.started = False       #: the log holds this process's whole history (start was called)
        self.bytes_written = 0     #: bytes appended since start (the start line not counted)
        self._held: dict[str, str] = {}   #: top-level key (not the attempts) -> its value as the log holds it

    @property
    def path(self) -> Path:
        return self.run.path / LOG

    def start(self, history: dict) -> None:
        """Begin the log with the whole ``history`` (history.json's content), replacing any log an
        earlier process left (its history is ``history``, read back at the start) at once."""
        self.run.append_line(LOG, history, first=True)
        self.started = True
        self._held = {k: _key(v) for k, v in history.items() if k != "attempts"}

    def append(self, patch: dict) -> int:
        """One line: ``attempts`` holding only the changed ones, and of the other top-level keys of
        ``patch`` those whose value differs from what the log already holds (the vendor baselines,
        timed once, are not written again with every step: a line's size stays that of its step)."""
        if not self.started:
            raise InternalError(f"{self.path}: appended to before it was started (this is a bug: please report it)")
        keys = {k: _key(v) for k, v in patch.items() if k != "attempts"}
        line = {k: v for k, v in patch.items() if k == "attempts" or self._held.get(k) != keys[k]}
        try:
            n = self.run.append_line(LOG, line)
        except BaseException:
            self.started = False                # the next save starts the log again, whole
            raise
        self._held.update(keys)
        self.bytes_written += n
        return n

    def finish(self, history: dict) -> Path:
        """Write ``history`` whole to history.json, then remove the log (it holds nothing more)."""
        target = self.run.write_json(HISTORY, history)
        remove_file(self.path)
        self.started = False
        return target


def _key(value) -> str:
    """A top-level value as a string that is equal exactly when the values are."""
    return json.dumps(value, sort_keys=True, default=str)


def read_history(run: RunDir | str | Path, default=None, *, check: bool = True):
    """The run's history as history.json's content: from ``history.jsonl`` when a process left one
    (a torn last line dropped), else from ``history.json``; ``default`` when there is neither.
    With ``check`` it is checked against history.schema.json; a damaged file is an InputError
    naming it (and its line, or the JSON path)."""
    path = run.path if isinstance(run, RunDir) else Path(run)
    log = path / LOG
    if log.is_file():
        folded = fold_log(log)                   # None: removed as its process finished (history.json is whole)
        if folded is not None:
            if check:
                check_schema(folded, "history.schema.json", log, size=log.stat().st_size)
            return folded
    return RunDir(path).read_json(HISTORY, default, check=check)
