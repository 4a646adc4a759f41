"""A JSON document kept as an append-only log of patches (JSON Lines), so that recording a change
costs the size of the change, not the size of the document.

Each line is an object holding some of the document's top-level keys.  Folding the lines in order
gives the document: a key's value is the last line's that has it, except the records list
(``records``, e.g. ``"attempts"``), whose records replace the earlier ones with the same ``id``
and otherwise join the end, in the order they first appeared.  The first line of a log is the
whole document (a writer starts a log by writing it whole, atomically), so any prefix of complete
lines folds to a document that was once written.

A line is complete when it ends in ``\\n``: a writer appends a line with its newline in one write
and flushes it to disk (:func:`kernel_forge.common.writes.append_file`), so only a kill mid-write
leaves bytes after the last newline.  Those are a torn line, dropped on reading; a complete line
that is not a JSON object is damage, an :class:`InputError` naming ``file:LINE``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kernel_forge.common.errors import InputError
from kernel_forge.common.reads import MAX_RECORD, Unreadable, loads, read_input_bytes


@dataclass
class Folded:
    """What a log holds: the ``document`` its complete lines fold to (None when it has none), how
    many complete ``lines`` there are, and the bytes of a torn last line that were dropped."""

    document: dict | None
    lines: int
    torn_bytes: int


def line(patch: dict, *, default=None) -> bytes:
    """One log line holding ``patch`` (compact JSON, its newline included; ``default`` as for
    :func:`json.dumps`); a number that is not finite is a ValueError."""
    return (json.dumps(patch, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=default)
            + "\n").encode("utf-8")


def fold(patches, *, records: str = "attempts") -> dict | None:
    """The document ``patches`` (dicts, in order) make (see the module docstring); None for none."""
    doc: dict | None = None
    index: dict = {}
    for patch in patches:
        doc = {} if doc is None else doc
        for key, value in patch.items():
            if key != records:
                doc[key] = value
                continue
            rows = doc.setdefault(records, [])
            for rec in value:
                at = index.get(rec.get("id")) if isinstance(rec, dict) else None
                if at is None:
                    if isinstance(rec, dict) and "id" in rec:
                        index[rec["id"]] = len(rows)
                    rows.append(rec)
                else:
                    rows[at] = rec
    return doc


def read_log(path: str | Path, what: str, *, records: str = "attempts", limit: int = MAX_RECORD) -> Folded:
    """The document the log ``path`` holds (``what`` names it in errors: "attempt log"); a torn last
    line is dropped, a damaged complete line is an :class:`InputError` naming ``file:LINE``."""
    p = Path(path)
    data = read_input_bytes(p, what, limit=limit)
    end = data.rfind(b"\n") + 1              # a torn line may end inside a character: split bytes
    try:
        complete = data[:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(p, f"the {what} is not UTF-8 text (byte offset {exc.start})") from None
    patches = []
    for lineno, raw in enumerate(complete.split("\n")[:-1], start=1):
        try:
            value = loads(raw, f"{p}:{lineno}")
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}:{lineno}: damaged line at column {exc.colno}: {exc.msg} (only a last line "
                             "without its newline is a write cut short, and skipped)",
                             hint="restore the file, or start a new run; kforge only appends to it") from None
        if not isinstance(value, dict):
            raise InputError(f"{p}:{lineno}: expected a JSON object, found {type(value).__name__}",
                             hint="restore the file, or start a new run; kforge only appends to it")
        if not isinstance(value.get(records, []), list):
            raise InputError(f"{p}:{lineno}: $.{records}: expected a list")
        patches.append(value)
    return Folded(fold(patches, records=records), len(patches), len(data) - end)


__all__ = ["Folded", "fold", "line", "read_log"]
