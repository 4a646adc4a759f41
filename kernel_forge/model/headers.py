"""The task's own headers: files in the manifest's folder that its ``"headers"`` list names.

A kernel may include them by that name (``#include "common.cuh"``); NVRTC gets their text in
memory, so nothing else in the folder is reachable.  A name must stay inside the folder after
every link is followed: a header that is (or sits behind) a symlink pointing out is refused,
when the manifest is loaded and again each time the text is read for a compile.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from kernel_forge.common.errors import IncludeRefused, ManifestError
from kernel_forge.common.json_path import json_path

#: the most text one header may hold
MAX_BYTES = 1 << 20


def problem(folder: Path, name: str) -> str | None:
    """Why ``name`` cannot be one of the task's headers (None: it can)."""
    if not name or os.path.isabs(name) or re.match(r"^[A-Za-z]:", name) or name.startswith(("/", "\\")):
        return f"{name!r} must be a path relative to the manifest's folder"
    root = folder.resolve()
    path = folder / name
    real = path.resolve()
    if real != root and root not in real.parents:
        link = " through a link" if real != Path(os.path.abspath(path)) else ""
        return f"{name} leads{link} to {real}, outside the task's folder {root}; a header must live in the task's own folder"
    if not real.is_file():
        return f"header not found: {name} (looked for {path})" if not real.exists() else f"{name} is not a regular file"
    if real.stat().st_size > MAX_BYTES:
        return f"{name} is larger than {MAX_BYTES} bytes"
    return None


def resolve(folder: Path, names: list[str], file: str) -> tuple[str, ...]:
    """The manifest's ``headers`` checked (each names a file in ``folder``): a :class:`ManifestError`
    naming the JSON path otherwise."""
    for i, name in enumerate(names):
        why = problem(folder, name)
        if why:
            raise ManifestError(why, file=file, json_path=json_path("headers", i),
                                hint="list files that sit in the manifest's folder (or below it), by relative path")
    return tuple(names)


def read(folder: Path, names: tuple[str, ...]) -> dict[str, str]:
    """name → text of each header, checked again as it is read (a link swapped in since the
    manifest was loaded is refused: :class:`IncludeRefused`)."""
    out = {}
    for name in names:
        why = problem(folder, name)
        if why:
            raise IncludeRefused(f"task header {why}")
        try:
            out[name] = (folder / name).resolve().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise IncludeRefused(f"task header {name} cannot be read as UTF-8 text ({exc})") from None
    return out
