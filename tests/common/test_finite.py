"""Tests of kernel_forge/common/finite.py: a non-finite number anywhere in what kforge reads is refused by its path."""
from __future__ import annotations

import json
import math

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.common.finite import WHY, check, describe, find, first_nonfinite

INF, NAN = float("inf"), float("nan")


def test_the_first_non_finite_number_in_document_order_is_named_by_its_json_path():
    value = {"cases": [{"vars": {"n": 4}}, {"vars": {"n": 1.5, "x": -INF}}], "gate": {"max_noise": NAN}}
    path, v = first_nonfinite(value)
    assert path == "$.cases[1].vars.x" and v == -INF            # before $.gate.max_noise, which comes later
    assert first_nonfinite({"odd key": [1.0, INF]})[0] == '$["odd key"][1]'
    assert first_nonfinite([NAN])[0] == "$[0]"
    found = first_nonfinite({"a": NAN})
    assert found[0] == "$.a" and math.isnan(found[1])


def test_finite_numbers_huge_integers_and_strings_are_not_refused():
    assert first_nonfinite({"a": [1.0, -1.5e308, 10 ** 400, "NaN", "Infinity", None, True]}) is None
    assert first_nonfinite(3.0) is None and first_nonfinite(INF) == ("$", INF)


def test_check_names_where_the_value_was_read_its_path_and_the_value():
    with pytest.raises(InputError) as info:
        check(json.loads('{"loop": {"roof_stop": Infinity}}'), "opt.json")
    assert str(info.value) == f"opt.json: $.loop.roof_stop: Infinity {WHY}"
    assert info.value.exit_code == 2
    check({"loop": {"roof_stop": 0.9}}, "opt.json")             # nothing to refuse: no error
    assert [describe(v) for v in (NAN, INF, -INF)] == ["NaN", "Infinity", "-Infinity"]


def test_text_that_cannot_hold_a_non_finite_number_skips_the_walk():
    value = json.loads('{"x": 1e999}')                           # json reads 1e999 as infinity
    assert find(value, '{"x": 1e999}') == ("$.x", INF)
    assert find(value) == ("$.x", INF)
    # the text is what the value was read from: with no NaN, Infinity or 3-digit exponent in it, nothing is walked
    assert find({"x": INF}, '{"x": 12.5}') is None
    assert find({"x": NAN}, '{"x": NaN}')[0] == "$.x" and find({"x": -INF}, '{"x": -Infinity}')[0] == "$.x"
