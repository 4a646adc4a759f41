"""Reading what a user gave kforge: text, JSON and JSON Lines files, with errors that name the
file, and the line (and column) of a syntax error."""
from __future__ import annotations

import json
import re
from pathlib import Path

from kernel_forge.common import finite
from kernel_forge.common.errors import InputError


#: the deepest nesting of arrays and objects kforge reads: its own files nest fewer than 10 levels,
#: and Python's json (and the schema check after it) recurse, so 100,000 levels would overflow the
#: stack (a RecursionError, exit 4) instead of being refused
MAX_JSON_DEPTH = 100
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def nesting_problem(text: str) -> str | None:
    """Why ``text`` is nested too deeply to read (with the line where it goes past
    :data:`MAX_JSON_DEPTH`), or None; brackets inside strings do not count."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return None
    depth = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                return f"JSON nested more than {MAX_JSON_DEPTH} levels deep at line {line}"
        elif c in "]}":
            depth -= 1
    return None


def loads(text: str, where: str):
    """The one way kforge reads JSON a user or a file gave: nesting deeper than
    :data:`MAX_JSON_DEPTH` and non-finite numbers are refused, naming ``where`` (the file); a
    syntax error is left to the caller, as :class:`json.JSONDecodeError`, to word."""
    problem = nesting_problem(text)
    if problem:
        raise InputError(f"{where}: {problem}")
    value = json.loads(text)
    finite.check(value, where, text=text)
    return value


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
        return loads(text, str(p))
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
        problem = nesting_problem(line)
        if problem:
            raise InputError(f"{p}:{lineno}: {problem.replace(' at line 1', '')}{tail}")
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}:{lineno}: invalid JSON at column {exc.colno}: {exc.msg}{tail}") from None
        found = finite.find(value, line)
        if found is not None:
            raise InputError(f"{p}:{lineno}: {found[0]}: {finite.describe(found[1])} {finite.WHY}{tail}")
        out.append((lineno, value))
    return out
