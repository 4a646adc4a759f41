"""Reading what a user gave kforge: every input file (manifest, kernel, config, replay request,
.npy header, archive export, run evidence) through one door that refuses what is not a regular
file (a folder, ``/dev/zero``, a FIFO, a device) and reads no more than a size limit, with errors
that name the file, and the line (and column) of a syntax error."""
from __future__ import annotations

import contextlib
import json
import re
import os
import stat
from pathlib import Path

from kernel_forge.common import finite
from kernel_forge.common.errors import InputError

#: the most bytes an input file may have unless its reader says otherwise (a manifest, a config)
MAX_INPUT = 64 << 20
#: the most bytes a kernel file may have (a kernel is one file; the MCP server bounds ``source`` alike)
MAX_KERNEL = 1 << 20
#: the most bytes of a file a run or an archive grows (history.json of a long run, an archive export)
MAX_RECORD = 512 << 20

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


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class Unreadable(InputError):
    """An input file that cannot be read: ``reason`` says why without the file's name (callers
    that name the file their own way, a manifest's ``file: $:``, reuse it)."""

    def __init__(self, path: str | Path, reason: str, *, hint: str | None = None):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}", hint=hint)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n} bytes"


@contextlib.contextmanager
def open_input(path: str | Path, what: str, *, limit: int = MAX_INPUT):
    """A binary file object of a regular file of at most ``limit`` bytes, or :class:`Unreadable`.
    The file is opened without waiting (a FIFO would block a plain open) and checked on the open
    descriptor, so a file swapped for a device between the check and the read is still refused."""
    p = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(p, flags)
    except IsADirectoryError:
        raise Unreadable(p, f"the {what} is a folder, not a file") from None
    except OSError as exc:
        if os.path.isdir(p):            # Windows refuses to open a folder with EACCES
            raise Unreadable(p, f"the {what} is a folder, not a file") from None
        raise Unreadable(p, f"cannot read the {what}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _kind(st.st_mode)
            raise Unreadable(p, f"the {what} is {kind}, not a file" if kind == "a folder" else
                             f"the {what} is {kind}, not a regular file; kforge reads inputs only from regular files")
        if st.st_size > limit:
            raise Unreadable(p, f"the {what} has {_size(st.st_size)}, over the {_size(limit)} kforge reads")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_input_bytes(path: str | Path, what: str, *, limit: int = MAX_INPUT) -> bytes:
    """The bytes of an input file (see :func:`open_input`); a file that grew past ``limit`` while
    it was read is refused too."""
    with open_input(path, what, limit=limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Unreadable(path, f"the {what} has more than {_size(limit)}, over what kforge reads")
    return data


def read_text_file(path: str | Path, what: str, *, limit: int = MAX_INPUT, encoding: str = "utf-8") -> str:
    """The UTF-8 text of a file kforge was given (``what``: "config", "archive export", ...), or an
    :class:`InputError` naming the file and saying why it cannot be read."""
    p = Path(path)
    data = read_input_bytes(p, what, limit=limit)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise Unreadable(p, f"the {what} is not UTF-8 text (byte offset {exc.start})") from None


def read_json_file(path: str | Path, what: str, *, limit: int = MAX_INPUT):
    """A JSON file a user gave (``what``: "config", "device description", ...), or an
    :class:`InputError` naming the file and the line and column of a syntax error."""
    p = Path(path)
    text = read_text_file(p, what, limit=limit)
    try:
        return loads(text, str(p))
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def read_jsonl(path: str | Path, what: str, *, text: str | None = None,
               note: str = "", limit: int = MAX_RECORD) -> list[tuple[int, object]]:
    """The values of a JSON Lines file a user gave (``what``: "archive export", "replay file", ...),
    each with its line number: ``[(1, {...}), (2, {...})]``.

    Lines end at ``\\n`` only (a ``\\r`` before it is dropped; a U+2028 inside a string does not end
    one); blank lines are skipped. A line that is not JSON, or holds NaN or Infinity, is an
    :class:`InputError` naming ``file:LINE`` (``note``, e.g. "nothing was imported", follows the
    reason). ``text``: the content when it was read already (``-`` for stdin), ``path`` then only
    names it."""
    p = Path(path)
    if text is None:
        text = read_text_file(p, what, limit=limit)
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
