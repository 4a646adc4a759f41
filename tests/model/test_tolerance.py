"""kernel_forge/model/tolerance.py: comparing a kernel's outputs with the reference's under tolerances."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from kernel_forge.common.dtypes import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, INT32, UINT32, UINT64, from_float, poison_value
from kernel_forge.model.task import Tolerance
from kernel_forge.model.tolerance import (compare, device_expected, device_expected_dtype, element_checks, exact,
                                          outputs_identical, rel_floor)


TOL = Tolerance(atol=1e-3, rtol=1e-2)


def test_compare_within_tolerance():
    expected = np.array([1.0, 100.0, 0.0, -4.0])
    # |a - e| <= atol + rtol * |e| (limits 0.011, 1.001, 0.001, 0.041); all values exact in binary
    actual = np.array([1 + 2 ** -7, 101.0, 2 ** -10, -4.03125])
    res = compare("y", actual, expected, FLOAT64, TOL)
    assert res.ok and res.mismatches == 0 and res.first == []
    assert res.max_abs == pytest.approx(1.0)
    assert res.total == 4
    assert res.summary().startswith("y: ok (max abs 1")


def test_compare_beyond_tolerance_reports_first_index():
    expected = np.array([1.0, 100.0, 0.0, -5.0])
    actual = np.array([1.0, 101.01, 0.0011, -5.0])
    res = compare("y", actual, expected, FLOAT64, TOL)
    assert not res.ok
    assert res.mismatches == 2
    assert [f["index"] for f in res.first] == [[1], [2]]
    assert res.first[0] == {"index": [1], "actual": 101.01, "expected": 100.0}
    assert res.unwritten == 0 and res.nonfinite_mismatches == 0
    assert res.summary().startswith("y: 2 of 4 elements differ; max abs 1.01")
    assert "first at (1,): got 101.01, expected 100.0" in res.summary()


def test_compare_multi_dim_indices_and_max_report():
    expected = np.zeros((3, 4))
    actual = np.zeros((3, 4), np.float32)
    actual[0, 3] = actual[1, 0] = actual[2, 2] = 1.0
    res = compare("m", actual, expected, FLOAT32, TOL, max_report=2)
    assert res.mismatches == 3
    assert [f["index"] for f in res.first] == [[0, 3], [1, 0]]


def test_compare_expected_is_reshaped():
    res = compare("m", np.ones((2, 3), np.float32), np.ones(6), FLOAT32, TOL)
    assert res.ok


@pytest.mark.parametrize("actual, expected, ok", [
    (np.nan, np.nan, True),
    (np.inf, np.inf, True),
    (-np.inf, -np.inf, True),
    (np.nan, 1.0, False),
    (1.0, np.nan, False),
    (np.inf, -np.inf, False),
    (-np.inf, np.inf, False),
    (np.inf, 1e308, False),
    (np.nan, np.inf, False),
])
def test_compare_nonfinite_positions(actual, expected, ok):
    res = compare("y", np.array([0.5, actual]), np.array([0.5, expected]), FLOAT64, TOL)
    assert res.ok is ok
    if not ok:
        assert res.nonfinite_mismatches == 1
        assert res.mismatches == 1
        assert res.first[0]["index"] == [1]
        assert res.max_abs == math.inf
        assert res.to_json()["max_abs"] == "inf"
        assert "1 NaN/Inf misplaced" in res.summary()


def test_compare_nan_reported_as_string():
    res = compare("y", np.array([np.nan]), np.array([2.0]), FLOAT64, TOL)
    assert res.first == [{"index": [0], "actual": "nan", "expected": 2.0}]
    json.dumps(res.to_json())      # JSON-safe


@pytest.mark.filterwarnings("ignore:overflow encountered in divide")
def test_compare_counts_unwritten():
    expected = np.zeros((2, 3))
    actual = np.zeros((2, 3), np.float32)
    actual[1, 2] = poison_value(FLOAT32)
    res = compare("y", actual, expected, FLOAT32, TOL)
    assert not res.ok
    assert res.unwritten == 1 and res.mismatches == 1
    assert res.first[0]["index"] == [1, 2]
    assert "1 never written" in res.summary()


def test_compare_poison_check_can_be_disabled():
    actual = np.full(3, poison_value(FLOAT32), np.float32)
    res = compare("y", actual, actual.astype(np.float64), FLOAT32, TOL, check_poison=False)
    assert res.ok and res.unwritten == 0


def test_compare_integers_exact():
    exact = Tolerance(0, 0)
    res = compare("h", np.array([5, 6, 7], np.uint32), np.array([5, 7, 7]), UINT32, exact)
    assert not res.ok and res.mismatches == 1
    assert res.first == [{"index": [1], "actual": 6, "expected": 7}]
    assert compare("h", np.array([5, -6], np.int32), np.array([5, -6]), INT32, exact).ok
    big = np.array([2 ** 64 - 2], np.uint64)
    assert compare("u", big, big.copy(), UINT64, exact).ok
    assert not compare("u", big, big - np.uint64(1), UINT64, exact).ok


def test_compare_integer_unwritten():
    res = compare("h", np.array([5, 0xDEADBEEF], np.uint32), np.array([5, 7]), UINT32, Tolerance(0, 0))
    assert res.unwritten == 1 and res.mismatches == 1


def test_compare_integers_with_tolerance():
    res = compare("h", np.array([10, 20], np.int32), np.array([11, 20]), INT32, Tolerance(1, 0))
    assert res.ok


def test_compare_size_mismatch():
    res = compare("y", np.zeros(4, np.float32), np.zeros(5), FLOAT32, TOL)
    assert not res.ok
    assert res.shape_error == "output has 4 elements, reference 5"
    assert res.mismatches == 4
    assert res.summary() == "y: output has 4 elements, reference 5"


def test_compare_bf16_decodes_bits():
    expected = np.array([1.0, 2.0, -3.0])
    actual = from_float(np.array([1.0, 2.0, -3.0], np.float32), BFLOAT16)
    assert compare("b", actual, expected, BFLOAT16, Tolerance(0, 0.004)).ok
    res = compare("b", actual, np.array([1.0, 2.02, -3.0]), BFLOAT16, Tolerance(0.005, 0))
    assert not res.ok
    assert res.first == [{"index": [1], "actual": 2.0, "expected": 2.02}]
    unwritten = np.array([0xFF7F, 0x3F80], np.uint16)
    res = compare("b", unwritten, np.array([1.0, 1.0]), BFLOAT16, Tolerance(0.005, 0))
    assert res.unwritten == 1 and res.first[0]["index"] == [0]


def test_to_json_is_json_safe():
    res = compare("y", np.array([1.0, np.inf]), np.array([2.0, 1.0]), FLOAT64, TOL)
    d = json.loads(json.dumps(res.to_json()))
    assert d["name"] == "y" and d["ok"] is False and d["mismatches"] == 2
    assert d["nonfinite_mismatches"] == 1


def test_compare_emits_no_numpy_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = compare("y", np.array([-3.0e38], np.float32), np.array([0.0]), FLOAT32, TOL)
    assert not res.ok


def _planted(dtype, n=10_007, seed=3):
    """A (actual bits, expected) pair with mismatches, NaNs, infinities and unwritten elements."""
    rng = np.random.default_rng(seed)
    expected = rng.standard_normal(n) * 10
    if dtype.kind == "float":
        values = expected + rng.standard_normal(n) * 1e-4
        values[rng.choice(n, 25, replace=False)] += 1.0            # beyond tolerance
        expected[rng.choice(n, 5, replace=False)] = np.nan
        values[rng.choice(n, 5, replace=False)] = np.inf
        actual = from_float(values, dtype) if dtype is BFLOAT16 else values.astype(dtype.storage)
    else:
        expected = np.round(expected)
        actual = expected.astype(dtype.storage)
        actual[rng.choice(n, 25, replace=False)] += 1
    actual[rng.choice(n, 7, replace=False)] = np.asarray(poison_value(dtype)).astype(actual.dtype)
    return actual.reshape(-1, 1), expected


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [FLOAT32, FLOAT64, BFLOAT16, INT32], ids=lambda d: d.name)
@pytest.mark.parametrize("chunk", [1, 7, 1000, 4096])
def test_compare_in_pieces_gives_the_same_answer_as_in_one(dtype, chunk):
    actual, expected = _planted(dtype)
    tol = Tolerance(atol=1e-3, rtol=1e-3) if dtype.kind == "float" else Tolerance(0, 0)
    whole = compare("y", actual, expected, dtype, tol, chunk=1 << 30, max_report=40)
    parts = compare("y", actual, expected, dtype, tol, chunk=chunk, max_report=40)
    assert not whole.ok and whole.mismatches >= 25 and whole.unwritten == 7
    assert json.dumps(parts.to_json()) == json.dumps(whole.to_json())
    # the first mismatches are reported in index order, by (row, column)
    rows = [f["index"][0] for f in whole.first]
    assert rows == sorted(rows) and len(rows) == min(40, whole.mismatches) and all(f["index"][1] == 0 for f in whole.first)


def test_compare_in_pieces_finds_one_bad_element_at_every_boundary():
    expected = np.arange(64, dtype=np.float64)
    for i in (0, 15, 16, 17, 63):
        actual = expected.astype(np.float32)
        actual[i] = -1.0
        res = compare("y", actual, expected, FLOAT32, TOL, chunk=16)
        assert res.mismatches == 1 and res.first[0]["index"] == [i] and res.max_abs == i + 1


def test_compare_zero_dimensional_output():
    assert compare("s", np.float32(2.0), np.float64(2.0), FLOAT32, TOL).ok
    res = compare("s", np.float32(3.0), np.float64(2.0), FLOAT32, TOL)
    assert res.mismatches == 1 and res.first == [{"index": [], "actual": 3.0, "expected": 2.0}]


def test_max_rel_stays_meaningful_when_the_reference_is_near_zero():
    # a relative error against a reference of 1e-300 is 1e294 and says nothing: below atol / rtol
    # the tolerance is absolute, so the relative error is taken against that magnitude
    res = compare("y", np.array([1e-6, 1.0]), np.array([1e-300, 1.0]), FLOAT64, TOL)
    assert res.ok
    assert res.max_rel == pytest.approx(1e-6 / (TOL.atol / TOL.rtol))
    assert res.tol_ratio == pytest.approx(1e-6 / TOL.atol)
    assert rel_floor(FLOAT64, TOL) == pytest.approx(0.1)
    assert rel_floor(FLOAT64, Tolerance(1e-3, 0)) == 1e-3
    assert rel_floor(INT32, Tolerance(0, 0)) == 1.0


def test_tol_ratio_is_the_worst_elements_share_of_its_tolerance():
    expected = np.array([1.0, 100.0, 8.0])
    limits = TOL.atol + TOL.rtol * np.abs(expected)
    actual = expected + np.array([0.25, 0.5, 0.0]) * limits
    res = compare("y", actual, expected, FLOAT64, TOL)
    assert res.ok and res.tol_ratio == pytest.approx(0.5)
    assert "worst 0.5 of tolerance" in res.summary()
    over = compare("y", expected + np.array([0.0, 1.5, 0.0]) * limits, expected, FLOAT64, TOL)
    assert not over.ok and over.tol_ratio == pytest.approx(1.5)
    assert over.to_json()["tol_ratio"] == pytest.approx(1.5)
    assert compare("y", expected, expected, FLOAT64, TOL).tol_ratio == 0.0


def test_exact_integers_use_all_or_nothing_of_their_tolerance():
    exact = Tolerance(0, 0)
    same = compare("h", np.array([0, 4], np.int32), np.array([0, 4]), INT32, exact)
    assert same.ok and same.tol_ratio == 0.0 and same.max_rel == 0.0
    res = compare("h", np.array([3, 4], np.int32), np.array([0, 4]), INT32, exact)
    assert res.max_rel == 3.0                     # against max(|expected|, 1), not 1e-300
    assert res.tol_ratio == math.inf and res.to_json()["tol_ratio"] == "inf"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [FLOAT32, FLOAT64, BFLOAT16, INT32], ids=lambda d: d.name)
def test_element_checks_are_what_compare_counts(dtype):
    actual, expected = _planted(dtype)
    tol = Tolerance(atol=1e-3, rtol=1e-3) if dtype.kind == "float" else Tolerance(0, 0)
    el = element_checks(actual.reshape(-1), expected, dtype, tol)
    res = compare("y", actual, expected, dtype, tol)
    assert int(el.bad.sum()) == res.mismatches and int(el.unwritten.sum()) == res.unwritten
    assert int(el.nonfinite_bad.sum()) == res.nonfinite_mismatches
    assert float(el.rel.max()) == res.max_rel and float(el.ratio.max()) == res.tol_ratio


def test_device_expected_converts_as_the_specification_does():
    f32 = np.array([1.5, 2.5], np.float32)
    assert device_expected(f32, FLOAT32, TOL).dtype == np.float32          # widened exactly on the GPU
    assert device_expected(f32.astype(np.float16), FLOAT16, TOL).dtype == np.float64
    assert device_expected(np.array([[1, 2]], np.int32), INT32, Tolerance(0, 0)).dtype == np.int64
    assert device_expected(np.array([1, 2], np.uint64), UINT64, Tolerance(0, 0)).dtype == np.uint64
    assert device_expected(np.array([1, 2], np.int32), INT32, Tolerance(1, 0)).dtype == np.float64
    assert device_expected(np.zeros((2, 3)), FLOAT64, TOL).shape == (6,)


def test_outputs_identical():
    a = {"x": np.array([0.0, 1.0], np.float32), "y": np.array([np.nan])}
    b = {"x": np.array([-0.0, 1.0], np.float32), "y": np.array([np.nan])}
    assert outputs_identical(a, b) == ["x"]       # -0.0 differs bit-for-bit, NaN equals NaN
    assert outputs_identical(a, {k: v.copy() for k, v in a.items()}) == []


def test_only_integers_without_a_tolerance_are_compared_exactly():
    assert exact(INT32, Tolerance(0, 0)) and exact(UINT64, Tolerance(0, 0))
    assert not exact(INT32, Tolerance(1, 0)) and not exact(INT32, Tolerance(0, 0), exact_ints=False)
    assert not exact(FLOAT32, Tolerance(0, 0))


def test_the_dtype_of_the_expected_values_on_the_gpu_is_known_before_the_reference_runs():
    exact_tol = Tolerance(0, 0)
    assert device_expected_dtype(INT32, exact_tol) == np.int64 and device_expected_dtype(UINT64, exact_tol) == np.uint64
    assert device_expected_dtype(FLOAT32, TOL) == np.float32 and device_expected_dtype(BFLOAT16, TOL) == np.float32
    assert device_expected_dtype(FLOAT16, TOL) == np.float64 and device_expected_dtype(INT32, TOL) == np.float64
    # what device_expected then gives for the reference's arrays (float32 for float32 and bf16 outputs)
    for dtype, tol, ref in ((INT32, exact_tol, np.array([1, 2], np.int32)), (BFLOAT16, TOL, np.ones(2, np.float32)),
                            (FLOAT16, TOL, np.ones(2, np.float16)), (UINT32, Tolerance(1, 0), np.ones(2, np.uint32))):
        assert device_expected(ref, dtype, tol).dtype == device_expected_dtype(dtype, tol), dtype.name


@pytest.mark.parametrize("dtype_name, expected_value", [("int8", -127), ("float16", -65504.0)])
def test_the_poison_where_the_reference_has_that_very_value_was_written(dtype_name, expected_value):
    """An int8 quantization's -127 and an fp16 output saturated to -65504 are the poison values:
    where the reference expects them they were written; elsewhere they are unwritten."""
    from kernel_forge.common.dtypes import BY_NAME

    dt = BY_NAME[dtype_name]
    expected = np.array([expected_value, 3.0, expected_value])
    actual = np.array([poison_value(dt), 3.0, poison_value(dt)], dtype=dt.numpy)
    res = compare("y", actual, expected, dt, Tolerance(0, 0))
    assert res.ok and res.unwritten == 0
    actual[1] = poison_value(dt)
    res = compare("y", actual, expected, dt, Tolerance(0, 0))
    assert not res.ok and res.unwritten == 1 and res.mismatches == 1
