"""kernel_forge/kinds/maps.py: elementwise maps and fused chains, on probes built here."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.kinds.maps import FUNCTIONS, find_elementwise
from kernel_forge.kinds.match import Match

from tests.support.kind_probes import probe

ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = ROOT / "manifests" / "vector_add.json"          # (a, b, c, n)
RNG = np.random.default_rng(11)



@pytest.mark.parametrize("name, value, want", [
    ("relu", -2.0, 0.0), ("relu", 3.0, 3.0), ("leaky_relu", -2.0, -0.02), ("square", -3.0, 9.0),
    ("softplus", 0.0, math.log(2.0)), ("silu", 0.0, 0.0), ("sigmoid", 0.0, 0.5), ("neg", 2.5, -2.5),
    ("gelu_erf", 1.0, 0.5 * (1.0 + math.erf(1.0 / math.sqrt(2.0)))),
    ("gelu_tanh", 1.0, 0.5 * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * 1.044715))),
])
def test_each_function_s_numpy_form_is_the_function_it_names(name, value, want):
    assert float(np.asarray(FUNCTIONS[name][0](np.array([value])), dtype=np.float64)[0]) == pytest.approx(want, rel=1e-12)


def test_a_sum_of_two_inputs_is_a_binary_add_bound_to_its_operands():
    a, b = RNG.standard_normal(37), RNG.standard_normal(37)
    p = probe(VECTOR_ADD, {"a": a, "b": b}, {"c": a + b}, n=37)
    assert next(find_elementwise(p)) == Match("elementwise", {"y": "c", "n": "n", "x": "a", "z": "b"},
                                              {"form": "binary", "op": "add"})


def test_a_function_of_one_input_is_a_map_naming_the_function():
    a, b = RNG.standard_normal(37), RNG.standard_normal(37)
    p = probe(VECTOR_ADD, {"a": a, "b": b}, {"c": np.maximum(b, 0.0)}, n=37)
    assert next(find_elementwise(p)) == Match("elementwise", {"y": "c", "n": "n", "x": "b"},
                                              {"form": "map", "act": "relu"})


def test_an_activation_of_an_input_plus_a_row_broadcast_bias_plus_a_residual_is_one_fused_chain():
    x, bias, res = RNG.standard_normal((3, 4)), RNG.standard_normal(4), RNG.standard_normal((3, 4))
    silu = (x + bias) / (1.0 + np.exp(-(x + bias)))
    p = probe(ROOT / "tests" / "data" / "kinds" / "bias_gelu_residual.json", {"x": x, "bias": bias, "res": res},
              {"out": silu + res}, rows=3, cols=4)
    assert next(find_elementwise(p)) == Match(
        "elementwise", {"y": "out", "n": "rows*cols", "x": "x", "bias": "bias", "res": "res", "cols": "cols"},
        {"form": "bias_act_res", "act": "silu"})


def test_an_output_no_hypothesis_reproduces_is_no_elementwise_map():
    a, b = RNG.standard_normal(37), RNG.standard_normal(37)
    assert list(find_elementwise(probe(VECTOR_ADD, {"a": a, "b": b}, {"c": np.sort(a)}, n=37))) == []


SILU_AND_MUL = ROOT / "tests" / "data" / "kinds" / "silu_and_mul_f16.json"     # (out, input, d), input T x 2d


@pytest.mark.parametrize("act_on, act", [("first", "silu"), ("second", "gelu_tanh")])
def test_an_activation_of_one_half_of_each_row_times_the_other_half_is_a_gated_unit_on_halves(act_on, act):
    s = RNG.standard_normal((5, 2, 6))                      # 5 rows of 2 halves of d = 6
    xs, zs = (s[:, 0], s[:, 1]) if act_on == "first" else (s[:, 1], s[:, 0])
    p = probe(SILU_AND_MUL, {"input": s}, {"out": FUNCTIONS[act][0](xs) * zs}, T=5, d=6)
    assert next(find_elementwise(p)) == Match("elementwise", {"y": "out", "n": None, "x": "input", "cols": "d"},
                                              {"form": "gated_halves", "act": act, "act_on": act_on})


def test_halves_taken_by_interleaving_are_not_a_gated_unit_on_halves():
    s = RNG.standard_normal((5, 6, 2))                      # gate and up interleaved value by value
    out = FUNCTIONS["silu"][0](s[..., 0]) * s[..., 1]
    p = probe(SILU_AND_MUL, {"input": s}, {"out": out}, T=5, d=6)
    assert [m for m in find_elementwise(p) if m.params.get("form") == "gated_halves"] == []


@pytest.mark.parametrize("grad, fn", [("gelu_tanh_grad", "gelu_tanh"), ("gelu_erf_grad", "gelu_erf"),
                                      ("silu_grad", "silu"), ("sigmoid_grad", "sigmoid"), ("tanh_grad", "tanh")])
def test_each_derivative_is_its_function_s_slope(grad, fn):
    v, h = np.linspace(-4.0, 4.0, 41), 1e-5
    slope = (np.asarray(FUNCTIONS[fn][0](v + h), dtype=np.float64) - np.asarray(FUNCTIONS[fn][0](v - h), dtype=np.float64)) / (2 * h)
    assert np.allclose(np.asarray(FUNCTIONS[grad][0](v), dtype=np.float64), slope, atol=1e-6)
