"""kernel_forge/kinds/match.py: the record of an identified operation and the comparisons the kinds use."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from kernel_forge.kinds.match import Match, close, dims, param_for
from kernel_forge.kinds.probe import Probe
from kernel_forge.model.inputs import CaseInputs
from kernel_forge.model.task import Case, load_task

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def probe(name: str, **vars) -> Probe:
    """A probe of a bundled task on a case with ``vars`` (values do not matter here: only sizes and scalars)."""
    task = load_task(MANIFESTS / f"{name}.json")
    case = Case("probe", "correctness", vars, 0)
    scalars = {a.name: task.scalar(a, case) for a in task.args if not a.is_buffer}
    sizes = {a.name: math.prod(task.shape(a, case)) for a in task.args if a.is_buffer}
    values = {n: np.zeros(s) for n, s in sizes.items()}
    return Probe(task=task, inputs=CaseInputs(case, 0, {}, scalars), values=values, scalars=scalars, outputs={},
                 sizes=sizes)


def test_describe_leaves_out_unbound_roles_and_shortens_floats_and_long_lists():
    m = Match("stencil2d", {"x": "img", "taps": None, "y": "out"}, {"k": 3, "eps": 1e-05, "taps": [0.0625] * 9})
    assert m.describe() == "stencil2d (x=img, y=out; k=3, eps=1e-05, taps=[0.0625, 0.0625, 0.0625, 0.0625, 0.0625, " \
                           "0.0625, ...])"
    assert Match("transpose", {"x": "a", "y": "b"}).describe() == "transpose (x=a, y=b)"


def test_to_json_is_the_manifest_s_kind_block_and_a_copy():
    m = Match("row_softmax", {"x": "x", "y": "y"}, {"log": True}, source="manifest")
    j = m.to_json()
    assert j == {"name": "row_softmax", "binding": {"x": "x", "y": "y"}, "params": {"log": True}}
    j["binding"]["x"] = "other"
    assert m.binding["x"] == "x"


def test_close_allows_rtol_of_each_value_plus_a_hundredth_of_it_at_the_output_s_scale():
    # per element: 2e-3 * |want| + 2e-5 * max|want| = 0.002003 + 0.002 for the first value
    assert close(np.array([1.0, 100.0]), np.array([1.0015, 100.0]))
    assert not close(np.array([1.0, 100.0]), np.array([1.005, 100.0]))
    assert close(np.array([1.0, 100.0]), np.array([1.005, 100.0]), rtol=5e-3)


def test_close_is_false_for_other_shapes_a_non_finite_prediction_or_a_nan_output():
    assert not close(np.ones(3), np.ones(4))
    assert not close(np.ones(2), np.array([1.0, np.inf]))
    assert not close(np.array([1.0, np.nan]), np.ones(2))
    assert close(np.ones((2, 3)), np.ones(6))              # flattened: the layout is the probe's


def test_dims_splits_a_size_by_each_integer_scalar_that_divides_it_rows_and_columns_above_one_first():
    p = probe("softmax_rows", rows=3, cols=4)
    assert dims(p, 12) == [(4, 3), (3, 4)]                  # by rows, by cols (the 2-D buffers add nothing new)
    assert dims(p, 4) == [(1, 4)]                           # 3 does not divide 4
    assert dims(p, 7) == []


def test_param_for_names_the_scalar_holding_a_value_else_a_product_of_two_or_three():
    p = probe("softmax_rows", rows=3, cols=4)
    assert (param_for(p, 3), param_for(p, 4), param_for(p, 12), param_for(p, 5)) == ("rows", "cols", "rows*cols", None)
    square = probe("softmax_rows", rows=4, cols=4)
    assert param_for(square, 4) == "rows" and param_for(square, 4, avoid=("rows",)) == "cols"
    assert param_for(probe("matmul_f32", m=2, n=3, k=5), 30) == "m*n*k"


def test_a_reference_that_rounds_its_output_to_bf16_is_allowed_bf16s_rounding_and_no_other_is():
    """llm.c's references round as the kernel stores (``(floatX)``): bf16's half-ulp, up to 2^-8 of a
    value, is above close()'s 2e-3, so a bf16-rounded output is compared at bf16's rounding.  Values
    not all bf16, or all whole numbers (counts), keep the usual tolerance."""
    exact = np.array([1.00390625 * 1.0039, -2.5, 0.3])           # 1.0078... rounds to 1.0078125 or 1.0
    bits = exact.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)
    assert np.max(np.abs(rounded - exact) / np.abs(exact)) > 2e-3
    assert close(rounded, exact)
    assert not close(rounded + 1e-7, exact)                      # not all bf16 values: the usual rtol
    off = rounded * (1 + 5e-3)
    assert not close(off.astype(np.float32).astype(np.float64), exact)
    assert not close(np.array([257.0, 3.0]), np.array([256.0, 3.0]))   # whole numbers: not widened
