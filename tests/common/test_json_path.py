"""kernel_forge.common.json_path: the one way a message names a place inside a JSON document."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel_forge.common.json_path import json_path

PACKAGE = Path(__file__).resolve().parents[2] / "kernel_forge"


def test_no_parts_is_the_root():
    assert json_path() == "$"


def test_keys_follow_a_dot_and_indices_sit_in_brackets():
    assert json_path("cases", 2, "vars", "N") == "$.cases[2].vars.N"
    assert json_path("loop", "max_iterations") == "$.loop.max_iterations"
    assert json_path("launch", "grid", 0) == "$.launch.grid[0]"


def test_a_key_with_a_dash_or_underscore_still_reads_plainly():
    assert json_path("best-case", "_x1") == "$.best-case._x1"


@pytest.mark.parametrize("key, written", [
    ("odd key", '["odd key"]'),
    ("a.b", '["a.b"]'),
    ("2X", '["2X"]'),
    ("", '[""]'),
    ('say "hi"', '["say \\"hi\\""]'),
    ("openai:gpt-x", '["openai:gpt-x"]'),
])
def test_a_key_that_is_not_a_plain_name_is_quoted_in_brackets(key, written):
    assert json_path("tunables", key) == "$.tunables" + written


def test_a_number_given_as_text_is_a_key_not_an_index():
    assert json_path("vars", "0") == '$.vars["0"]'
    assert json_path("vars", 0) == "$.vars[0]"


def test_the_parts_of_a_jsonschema_error_give_its_path():
    import jsonschema

    schema = {"type": "object", "properties": {"cases": {"type": "array", "items": {"type": "string"}}}}
    err = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors({"cases": ["a", 3]}))
    assert json_path(*err.absolute_path) == "$.cases[1]"


def test_no_other_module_builds_a_json_path_by_hand():
    """A path built from parts anywhere else (``out = "$"`` then a loop, ``"$" + "".join(...)``)
    would drift from this one; use :func:`json_path`."""
    by_hand = re.compile(r'''(=\s*|\(\s*)["']\$["']\s*(\+|$)''', re.MULTILINE)
    found = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if p.name != "json_path.py" and by_hand.search(p.read_text(encoding="utf-8"))]
    assert found == []
