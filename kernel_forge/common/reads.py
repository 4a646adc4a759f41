"""Reading what a user gave kforge: text, JSON and JSON Lines files, with errors that name the
file, and the line (and column) of a syntax error."""
from __future__ import annotations

import json
from pathlib import Path

from kernel_forge.common import finite
from kernel_forge.common.errors import InputError


def read_text_file(path: str | Path, what: str) -> str:
    """The UTF-8 text of a file kforge was given (``what``: "config", "archive export", ...), or an
    :class:`InputError` naming the file and saying why it cannot be read."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{p}: cannot read the {what}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: the {what} is not UTF-8 text (byte offset {exc.start})") from None


def read_json_file(path: str | Path, what: str):
    """A JSON file a user gave (``what``: "config", "device description", ...), or an
    :class:`InputError` naming the file and the line and column of a syntax error."""
    p = Path(path)
    text = read_text_file(p, what)
    try:
        return finite.loads(text, str(p))
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def read_jsonl(path: str | Path, what: str, *, text: str | None = None,
               note: str = "") -> list[tuple[int, object]]:
    """The values of a JSON Lines file a user gave (``what``: "archive export", "replay file", ...),
    each with its line number: ``[(1, {...}), (2, {...})]``.

    Lines end at ``\\n`` only (a ``\\r`` before it is dropped; a U+2028 inside a string does not end
    one); blank lines are skipped. A line that is not JSON, or holds NaN or Infinity, is an
    :class:`InputError` naming ``file:LINE`` (``note``, e.g. "nothing was imported", follows the
    reason). ``text``: the content when it was read already (``-`` for stdin), ``path`` then only
    names it."""
    p = Path(path)
    if text is None:
        text = read_text_file(p, what)
    tail = f"; {note}" if note else ""
    out = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}:{lineno}: invalid JSON at column {exc.colno}: {exc.msg}{tail}") from None
        found = finite.find(value, line)
        if found is not None:
            raise InputError(f"{p}:{lineno}: {found[0]}: {finite.describe(found[1])} {finite.WHY}{tail}")
        out.append((lineno, value))
    return out
