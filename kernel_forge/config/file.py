"""The ``kforge optimize --config`` file: sections ``loop``, ``gate``, ``proposer`` (each a
settings dataclass's fields), ``manifest`` and ``runs_dir``; every value checked by the one
validator, a bad one named by the file and its JSON path."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernel_forge.common.errors import InputError
from kernel_forge.common.json_path import json_path
from kernel_forge.common.reads import read_json_file
from kernel_forge.config.build import InFile, Where, check_values
from kernel_forge.config.sections import RUN_SECTIONS

#: the top-level keys of a config file
KEYS = ("loop", "gate", "proposer", "manifest", "runs_dir", "$comment")


def sections_from(data: Mapping[str, Any], where: Where) -> dict[str, dict[str, Any]]:
    """The ``loop`` / ``gate`` / ``proposer`` parts of ``data``, each value checked (absent: ``{}``)."""
    out = {}
    for section, cls in RUN_SECTIONS:
        sub = data.get(section, {})
        if not isinstance(sub, dict):
            raise InputError(f"{where.place(section)} must be an object")
        out[section] = check_values(cls, sub, where)
    return out


def load_config_file(path: str | Path) -> dict:
    """A config file, checked: its sections' values typed and within bounds, unknown keys refused."""
    p = Path(path)
    data = read_json_file(p, "config")
    if not isinstance(data, dict):
        raise InputError(f"{p}: a config is a JSON object")
    for k in data:
        if k not in KEYS:
            raise InputError(f"{p}: {json_path(k)}: unknown section (loop, gate, proposer, manifest, runs_dir)")
    data.update(sections_from(data, InFile(str(p))))
    for k in ("manifest", "runs_dir"):
        if k in data and not isinstance(data[k], str):
            raise InputError(f"{p}: {json_path(k)}: expected a string (a path), got {data[k]!r}")
    return data
