"""kernel_forge/kinds/maps.py: elementwise maps and fused chains, on probes built here."""
from __future__ import annotations

import math
import re
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


@pytest.mark.parametrize("make, form, act, a, b", [
    (lambda x: np.exp(x / 255.0), "affine_act", "exp", 1 / 255, 0.0),                   # Rodinia's extract
    (lambda x: 1.0 / (1.0 + np.exp(-(2.0 * x - 0.5))), "affine_act", "sigmoid", 2.0, -0.5),
    (lambda x: 3.0 * np.maximum(x, 0.0) - 1.0, "act_affine", "relu", 3.0, -1.0),
    (lambda x: 3.0 * x + 1.25, "affine_act", "identity", 3.0, 1.25),
])
def test_a_map_with_constants_written_in_the_kernel_is_fitted(make, form, act, a, b):
    x, other = RNG.standard_normal(600), RNG.standard_normal(600)
    m = next(find_elementwise(probe(VECTOR_ADD, {"a": x, "b": other}, {"c": make(x)}, n=600)))
    assert (m.binding["x"], m.params["form"], m.params["act"]) == ("a", form, act), m
    assert m.params["a"] == pytest.approx(a, rel=1e-6) and m.params["b"] == pytest.approx(b, abs=1e-6)


def test_fitted_constants_do_not_make_a_map_of_what_no_line_through_a_function_gives():
    x, other = RNG.standard_normal(600), RNG.standard_normal(600)
    got = np.exp(x / 255.0) + 0.01 * other                  # a second input's share: no constant fits it
    assert [m for m in find_elementwise(probe(VECTOR_ADD, {"a": x, "b": other}, {"c": got}, n=600))
            if m.params["form"] in ("affine_act", "act_affine")] == []


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


#: functions defined only where their value is: tried on positive values
_POSITIVE = {"log", "neg_log", "sqrt", "rsqrt", "reciprocal", "log1p"}


def _function_values() -> dict:
    """Values each function is tried on: -8 to 8, positive ones where the function needs them."""
    return {n: (np.linspace(0.05, 8.0, 97) if n in _POSITIVE else np.linspace(-8.0, 8.0, 97)) for n in FUNCTIONS}


def _host_values(tmp_path, ctype: str, forms: dict, values: dict, prelude: str = "") -> dict[str, list[float]]:
    """Each function's CUDA form in ``forms`` compiled for the host (the emulation's intrinsics) in
    ``ctype`` and run on its ``values``: what it printed, by name."""
    import subprocess

    from tests.support.host_emulation import EMU_HEADER, host_compiler

    if host_compiler() is None:
        pytest.skip("no C++20 compiler here")
    cxx, _ = host_compiler()
    suffix, digits = ("f", 9) if ctype == "float" else ("", 17)
    body = []
    for i, name in enumerate(forms):
        vals = ", ".join(f"{v!r}{suffix}" for v in values[name].tolist())
        body.append(f"  {{ const {ctype} xs[] = {{{vals}}};\n"
                    f"    for ({ctype} v : xs) std::printf(\"{i} %.{digits}g\\n\", (double)({forms[name]})); }}")
    (tmp_path / "emu.h").write_text(EMU_HEADER)
    (tmp_path / "f.cpp").write_text('#include "emu.h"\n#include <cstdio>\n#include <cmath>\n' + prelude
                                    + "int main()\n{\n" + "\n".join(body) + "\n}\n")
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-w", f"-I{tmp_path}", str(tmp_path / "f.cpp"), "-o",
                        str(tmp_path / "f")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    got: dict[str, list[float]] = {}
    names = list(forms)
    for line in subprocess.run([str(tmp_path / "f")], capture_output=True, text=True, check=True).stdout.split("\n"):
        if line:
            i, v = line.split()
            got.setdefault(names[int(i)], []).append(float(v))
    return got


def test_every_function_s_cuda_form_computes_its_numpy_form(tmp_path):
    """Each FUNCTIONS entry's CUDA expression, compiled for the host (the emulation's intrinsics) and
    run on values from -8 to 8 (positive ones where the function needs them), agrees with its NumPy
    form to float32 accuracy -- a wrong constant or a swapped branch fails here before any GPU."""
    values = {n: v.astype(np.float32) for n, v in _function_values().items()}
    got = _host_values(tmp_path, "float", {n: cuda for n, (_, cuda) in FUNCTIONS.items()}, values)
    for name, (fn, _) in FUNCTIONS.items():
        want = np.asarray(fn(values[name].astype(np.float64)), dtype=np.float64)
        assert np.allclose(got[name], want, rtol=2e-5, atol=2e-6), name


def test_every_function_s_double_form_computes_its_numpy_form_to_double_accuracy(tmp_path):
    """in_double(each FUNCTIONS entry's CUDA expression), compiled for the host in double and run on
    values from -8 to 8, agrees with its NumPy form to 1e-12: no float function, intrinsic or literal
    is left to round it to float (elementwise_f64's ops)."""
    from kernel_forge.kinds.maps import in_double

    forms = {n: in_double(cuda) for n, (_, cuda) in FUNCTIONS.items()}
    for name, code in forms.items():
        assert in_double(code) == code and not re.search(r"\d[\d.]*f\b|\bfloat\b", code), (name, code)
    values = _function_values()
    got = _host_values(tmp_path, "double", forms, values,
                       prelude="inline double rsqrt(double v) { return 1.0 / std::sqrt(v); }\n")
    for name, (fn, _) in FUNCTIONS.items():
        want = np.asarray(fn(values[name]), dtype=np.float64)
        assert np.allclose(got[name], want, rtol=1e-12, atol=1e-13), name


@pytest.mark.parametrize("name, value, want", [
    ("relu6", 7.0, 6.0), ("hardswish", 1.0, 1.0 * 4.0 / 6.0), ("hardsigmoid", -4.0, 0.0), ("elu", -1.0, math.expm1(-1.0)),
    ("selu", 1.0, 1.0507009873554805), ("mish", 1.0, math.tanh(math.log1p(math.e))), ("softsign", -3.0, -0.75),
    ("gelu_quick", 1.0, 1.0 / (1.0 + math.exp(-1.702))), ("log_sigmoid", 0.0, -math.log(2.0)), ("sign", -0.5, -1.0),
])
def test_the_further_activations_are_torch_s(name, value, want):
    assert float(np.asarray(FUNCTIONS[name][0](np.array([value])), dtype=np.float64)[0]) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("act", ["hardswish", "mish", "elu", "gelu_quick"])
def test_a_further_activation_is_identified_as_a_map(act):
    x = RNG.standard_normal(41) * 3.0
    p = probe(ROOT / "manifests" / "gelu_bf16.json", {"x": x}, {"y": FUNCTIONS[act][0](x)}, n=41)
    assert next(find_elementwise(p)).params == {"form": "map", "act": act}


@pytest.mark.slow
def test_every_function_compiles_with_nvrtc_in_the_bound_elementwise_pattern():
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.kinds.bind import instantiate
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.model.task import load_task
    from kernel_forge.search.bound import gate_source

    task = load_task(ROOT / "manifests" / "gelu_bf16.json")
    for name in FUNCTIONS:
        [bound] = instantiate(task, Match("elementwise", {"x": "x", "y": "y", "n": "n"}, {"form": "map", "act": name}))
        result = compile_source(gate_source(bound.source), arch="sm_90", file_label=bound.label)
        assert result.cubin and "warning" not in result.log.lower(), (name, result.log)
        assert parse_candidate(bound.source, name=bound.label).configurations()
