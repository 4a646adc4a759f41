"""Reading what a user gave kforge: text and JSON files, with errors that name the file, and the
line and column of a syntax error."""
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
