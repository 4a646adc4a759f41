"""Test tasks of tests/data/kinds copied into a folder with an edited manifest or an extra reference,
and the check of what identification found (kind, binding, parameters)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.paths import ROOT

DATA = ROOT / "tests" / "data" / "kinds"


def copy_task(tmp_path, name, edit=None, ref=None) -> Path:
    data = json.loads((DATA / f"{name}.json").read_text())
    shutil.copy(DATA / "refs.py", tmp_path / "refs.py")
    for cu in DATA.glob("*.cu"):
        shutil.copy(cu, tmp_path / cu.name)
    if ref is not None:
        (tmp_path / "refs.py").write_text((DATA / "refs.py").read_text() + "\n\n" + ref)
    if edit:
        edit(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def check_match(found, kind, roles, params):
    m = found.match
    assert m is not None, found.why
    assert m.kind == kind, m.describe()
    for role, name in roles.items():
        assert m.binding.get(role) == name, (role, m.describe())
    for key, value in params.items():
        got = m.params.get(key)
        if isinstance(value, list):
            assert got == pytest.approx(value, abs=1e-6), key
        else:
            assert got == value, (key, m.describe())
