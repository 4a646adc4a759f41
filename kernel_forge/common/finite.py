"""Every number kforge reads from a user or a file is finite.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON, but accepted) and turns
``1e999`` into infinity, and no JSON Schema keyword can refuse them, so every JSON file kforge reads
goes through :func:`kernel_forge.common.reads.loads`, which refuses a non-finite number (:func:`check`)
naming the JSON path where it sits.
"""
from __future__ import annotations

import math
import re

from kernel_forge.common.errors import InputError
from kernel_forge.common.json_path import json_path

#: what a non-finite number can look like in JSON text (checked before walking the whole value)
_SUSPECT = re.compile(r"NaN|Infinity|[eE][+]?\d{3,}")


def first_nonfinite(value, parts: tuple = ()) -> tuple[str, float] | None:
    """(JSON path, value) of the first NaN or ±Infinity in ``value``, or None."""
    stack = [(value, parts)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return json_path(*at), v
        elif isinstance(v, dict):
            stack.extend((x, at + (k,)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, at + (i,)) for i, x in reversed(list(enumerate(v))))
    return None


def describe(v: float) -> str:
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


#: what the messages say after the value
WHY = "is not a finite number; every number kforge reads must be finite (JSON has no NaN or Infinity)"


def find(value, text: str | None = None) -> tuple[str, float] | None:
    """:func:`first_nonfinite`, skipping the walk when ``text`` (the JSON ``value`` was read from)
    cannot hold a non-finite number."""
    if text is not None and not _SUSPECT.search(text):
        return None
    return first_nonfinite(value)


def check(value, where: str, *, text: str | None = None) -> None:
    """Refuse a non-finite number in ``value``, naming ``where`` and its JSON path."""
    found = find(value, text)
    if found is not None:
        path, v = found
        raise InputError(f"{where}: {path}: {describe(v)} {WHY}")


__all__ = ["check", "first_nonfinite"]
