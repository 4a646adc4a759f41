"""kernel_forge.model.inputs: seeded inputs.  CPU only (the bf16 bits and the timing statistics:
tests/common/test_dtypes.py and test_stats.py; output comparison: test_tolerance.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.common.dtypes import BFLOAT16, FLOAT32, INT32, UINT32, poison_value
from kernel_forge.common.errors import ManifestError
from kernel_forge.model.inputs import generate, host_values
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


# -- a manifest exercising every init kind ----------------------------------------------------

SIGNATURE = ('extern "C" __global__ void k(const float* x, const int* r, const __nv_bfloat16* h, '
             'const float* f, const float* ar, const float* cst, const int* rn, const double* u, '
             'float* out, __nv_bfloat16* hout, int* iout, unsigned int* uout, float* acc, int n)')


def manifest(npy: str = "data.npy") -> dict:
    return {
        "name": "k",
        "signature": SIGNATURE,
        "reference": {"python": "ref.py:reference"},
        "initial": "k.cu",
        "args": {
            "x": {"shape": ["n"], "init": "normal"},
            "r": {"shape": ["n"], "init": {"kind": "randint", "low": -3, "high": 4}},
            "h": {"shape": ["n"], "init": {"kind": "normal", "std": 3.0}},
            "f": {"shape": [2, "n / 2"], "init": {"kind": "npy", "path": npy}},
            "ar": {"shape": ["n"], "init": {"kind": "arange", "start": 5, "step": 0.5}},
            "cst": {"shape": ["n"], "init": {"kind": "constant", "value": 2.25}},
            "rn": {"shape": ["n"], "init": {"kind": "normal", "std": 10.0}},
            "u": {"shape": ["n", 2], "init": {"kind": "uniform", "low": 10, "high": 11}},
            "out": {"shape": ["n"], "output": True},
            "hout": {"shape": ["n"], "output": True},
            "iout": {"shape": ["n"], "output": True},
            "uout": {"shape": [3], "output": True},
            "acc": {"shape": ["n"], "output": True, "init": "ones"},
            "n": "n",
        },
        "launch": {"grid": [1], "block": [32]},
        "tolerance": {"atol": 1e-5, "rtol": 1e-5},
        "cases": [
            {"name": "a", "role": "correctness", "vars": {"n": 64}},
            {"name": "b", "role": "performance", "vars": {"n": 64}},
        ],
    }


@pytest.fixture
def task(tmp_path):
    (tmp_path / "ref.py").write_text("def reference(*args):\n    pass\n")
    (tmp_path / "k.cu").write_text(f"{SIGNATURE} {{}}\n")
    np.save(tmp_path / "data.npy", np.arange(64, dtype=np.float64) * 1.5)
    p = tmp_path / "k.json"
    p.write_text(json.dumps(manifest()))
    return load_task(p)


# -- inputs ------------------------------------------------------------------------------------

def test_generate_is_deterministic_for_a_seed(task):
    case = task.case("a")
    g1, g2 = generate(task, case, 7), generate(task, case, 7)
    assert set(g1.buffers) == {"x", "r", "h", "f", "ar", "cst", "rn", "u", "out", "hout", "iout",
                               "uout", "acc"}
    assert g1.scalars == {"n": 64}
    for name in g1.buffers:
        assert np.array_equal(g1.buffers[name], g2.buffers[name], equal_nan=True), name
        assert g1.checksum(name) == g2.checksum(name)
    assert g1.seed == 7 and g1.case is case


def test_generate_differs_across_seeds_and_cases(task):
    a7, a8, b7 = (generate(task, task.case("a"), 7), generate(task, task.case("a"), 8),
                  generate(task, task.case("b"), 7))
    for name in ("x", "r", "h", "rn", "u"):
        assert not np.array_equal(a7.buffers[name], a8.buffers[name]), name
        assert not np.array_equal(a7.buffers[name], b7.buffers[name]), name
        assert a7.checksum(name) != a8.checksum(name)
    # deterministic inits do not depend on the seed
    for name in ("f", "ar", "cst", "acc"):
        assert np.array_equal(a7.buffers[name], a8.buffers[name]), name


def test_generate_distributions_for_vector_add():
    t = load_task(MANIFESTS / "vector_add.json")
    tiny = generate(t, t.case("tiny"), 0)
    assert tiny.buffers["a"].dtype == np.float32 and tiny.buffers["a"].shape == (37,)
    assert tiny.scalars == {"n": 37}
    g = generate(t, t.case("odd"), 0)                  # 1000003 elements
    a, b = g.buffers["a"], g.buffers["b"]
    assert a.shape == b.shape == (1000003,)
    assert abs(float(a.mean())) < 0.01 and abs(float(a.std()) - 1.0) < 0.01      # normal(0, 1)
    assert b.min() >= -2.0 and b.max() < 2.0                                     # uniform(-2, 2)
    assert abs(float(b.mean())) < 0.01 and abs(float(b.std()) - 4 / 12 ** 0.5) < 0.01
    assert len(np.unique(a[:1000])) == 1000


def test_pure_outputs_are_poisoned(task):
    g = generate(task, task.case("a"), 0)
    out, hout, iout, uout = (g.buffers[k] for k in ("out", "hout", "iout", "uout"))
    assert out.dtype == np.float32 and out.shape == (64,) and np.all(out == np.float32(-3.0e38))
    assert hout.dtype == np.uint16 and np.all(hout == 0xFF7F)
    assert iout.dtype == np.int32 and np.all(iout == -2147483647 + 17)
    assert uout.dtype == np.uint32 and np.all(uout == 0xDEADBEEF)
    for arr, dt in ((out, FLOAT32), (hout, BFLOAT16), (iout, INT32), (uout, UINT32)):
        assert np.all(arr == np.asarray(poison_value(dt)).astype(arr.dtype))
    # an in/out buffer gets its init, not poison
    assert np.all(g.buffers["acc"] == 1.0)


def test_randint_bounds_and_dtype(task):
    r = generate(task, task.case("a"), 3).buffers["r"]
    assert r.dtype == np.int32
    assert r.min() >= -3 and r.max() <= 3          # high is exclusive
    assert set(np.unique(r)) <= set(range(-3, 4))
    assert len(np.unique(r)) >= 5                   # 64 draws cover most of the 7 values


def test_normal_for_int_buffer_is_rounded(task):
    rn = generate(task, task.case("a"), 0).buffers["rn"]
    assert rn.dtype == np.int32
    assert np.abs(rn).max() > 3                     # std 10, really drawn


def test_uniform_float64_two_dims(task):
    u = generate(task, task.case("a"), 0).buffers["u"]
    assert u.dtype == np.float64 and u.shape == (64, 2)
    assert u.min() >= 10 and u.max() < 11


def test_bf16_buffers_are_uint16_bit_patterns(task):
    g = generate(task, task.case("a"), 0)
    h = g.buffers["h"]
    assert h.dtype == np.uint16 and h.shape == (64,)
    values = host_values(task.arg("h"), h)
    assert values.dtype == np.float32
    assert np.array_equal(values.view(np.uint32) >> 16, h.astype(np.uint32))
    assert np.all(values.view(np.uint32) & 0xFFFF == 0)
    assert values.std() > 1.5                       # std 3
    # host_values leaves other dtypes alone
    assert host_values(task.arg("x"), g.buffers["x"]) is g.buffers["x"]


def test_npy_arange_constant(task):
    g = generate(task, task.case("a"), 0)
    f = g.buffers["f"]
    assert f.dtype == np.float32 and f.shape == (2, 32)
    assert np.array_equal(f.ravel(), (np.arange(64) * 1.5).astype(np.float32))
    assert np.array_equal(g.buffers["ar"], (5 + 0.5 * np.arange(64)).astype(np.float32))
    assert np.all(g.buffers["cst"] == np.float32(2.25))


def test_npy_with_wrong_size(tmp_path, task):
    np.save(tmp_path / "data.npy", np.zeros(10))
    with pytest.raises(ManifestError) as ei:
        generate(task, task.case("a"), 0)
    assert ei.value.json_path == "$.args.f.init.path"
    assert "holds 10 elements, shape (2, 32) needs 64" in str(ei.value)


