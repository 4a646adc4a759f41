"""kernel_forge.model.inputs, common.dtypes and common.stats: seeded inputs, bf16 bits, timing statistics.
CPU only.  (Output comparison, model/tolerance.py: test_tolerance.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.common import dtypes
from kernel_forge.common.dtypes import BFLOAT16, FLOAT16, FLOAT32, INT32, UINT32, from_float, poison_value, to_float
from kernel_forge.common.errors import ManifestError
from kernel_forge.model.inputs import generate, host_values
from kernel_forge.common.stats import Timing, faster_beyond_noise, geomean, noise_band, summarize
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


def test_poison_values_are_finite():
    for dt in {d.name: d for d in dtypes.C_TYPES.values()}.values():
        pv = np.asarray(poison_value(dt)).astype(dt.numpy)
        assert np.all(np.isfinite(to_float(pv, dt))), dt.name


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


# -- dtypes: bf16 ------------------------------------------------------------------------------

def bf16(*values) -> list[int]:
    return [int(v) for v in from_float(np.array(values, dtype=np.float32), BFLOAT16)]


def test_bf16_exact_values():
    assert bf16(1.0, -2.5, 0.0, -0.0, np.inf, -np.inf) == [0x3F80, 0xC020, 0x0000, 0x8000, 0x7F80, 0xFF80]


def test_bf16_round_to_nearest_even():
    # 1 + 2^-8 lies halfway between 0x3F80 (even) and 0x3F81: ties go to even
    assert bf16(1 + 2 ** -8) == [0x3F80]
    # 1 + 3 * 2^-8 lies halfway between 0x3F81 (odd) and 0x3F82 (even)
    assert bf16(1 + 3 * 2 ** -8) == [0x3F82]
    # just above the halfway point rounds up
    assert bf16(1 + 2 ** -8 + 2 ** -16) == [0x3F81]
    # the carry propagates into the exponent
    assert bf16(np.float32(np.frombuffer(np.uint32(0x3FFF8000).tobytes(), np.float32)[0])) == [0x4000]
    # the largest float32 rounds to infinity, as hardware does
    assert bf16(np.finfo(np.float32).max) == [0x7F80]


def test_bf16_nan():
    out = bf16(np.nan, -np.nan)
    assert out == [0x7FC0, 0x7FC0]
    assert np.isnan(to_float(np.array(out, np.uint16), BFLOAT16)).all()


def test_bf16_round_trip_of_representable_values():
    bits = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16)
    finite = bits[np.isfinite(to_float(bits, BFLOAT16))]
    assert np.array_equal(from_float(to_float(finite, BFLOAT16), BFLOAT16), finite)


def test_to_float_other_dtypes():
    a = np.array([1.5, 2.5], np.float32)
    assert to_float(a, FLOAT32) is not None and np.array_equal(to_float(a, FLOAT32), a)
    assert from_float(np.array([1.5, -2.0]), INT32).dtype == np.int32
    assert from_float(np.array([1.5]), FLOAT16).dtype == np.float16


# -- stats ---------------------------------------------------------------------------------------

def test_summarize_values():
    t = summarize([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert t.median == 5.5 and t.mean == 5.5 and t.min == 1.0 and t.max == 10.0
    assert t.p10 == pytest.approx(1.9) and t.p90 == pytest.approx(9.1)
    assert t.p20 == pytest.approx(2.8) and t.p80 == pytest.approx(8.2)
    assert t.cv == pytest.approx(np.std(np.arange(1, 11), ddof=1) / 5.5)
    assert t.spread == pytest.approx((9.1 - 1.9) / 5.5)
    assert noise_band(t) == pytest.approx((8.2 - 2.8) / 11)
    assert t.samples_us == tuple(float(x) for x in range(1, 11))


def test_summarize_single_sample_and_order():
    t = summarize([5.0])
    assert (t.median, t.p10, t.p90, t.cv) == (5.0, 5.0, 5.0, 0.0)
    assert summarize([3, 1, 2]).median == 2.0


@pytest.mark.parametrize("samples, message", [
    ([], "no timing samples"),
    ([1.0, -1.0], "finite and non-negative"),
    ([1.0, float("nan")], "finite and non-negative"),
    ([float("inf")], "finite and non-negative"),
])
def test_summarize_rejects_bad_samples(samples, message):
    with pytest.raises(ValueError, match=message):
        summarize(samples)


def test_timing_json_round_trip():
    t = summarize([1.0, 2.0, 4.0], flushed=False, graph_us=0.5)
    d = t.to_json()
    assert d["n"] == 3 and d["flushed"] is False and d["graph_us"] == 0.5
    assert d["samples_us"] == [1.0, 2.0, 4.0]
    assert "samples_us" not in t.to_json(with_samples=False)
    assert Timing.from_json(d) == t


def test_geomean():
    assert geomean([1, 4, 16]) == pytest.approx(4.0)
    assert geomean([2.0]) == pytest.approx(2.0)
    assert geomean([10, 1000]) == pytest.approx(100.0)


@pytest.mark.parametrize("values", [[], [0, 1], [-1.0], [float("inf")], [float("nan")]])
def test_geomean_rejects(values):
    with pytest.raises(ValueError, match="geometric mean needs positive finite values"):
        geomean(values)


def test_faster_beyond_noise():
    old = summarize([10.0] * 20)
    assert faster_beyond_noise(summarize([5.0] * 20), old)
    assert not faster_beyond_noise(old, summarize([5.0] * 20))
    # within the 1 % margin
    assert not faster_beyond_noise(summarize([9.95] * 20), old)
    assert faster_beyond_noise(summarize([9.95] * 20), old, margin=0.001)
    # overlapping noise bands: medians differ but p80(new) >= p20(old)
    noisy_old = summarize(list(np.linspace(8.0, 12.0, 21)))
    noisy_new = summarize(list(np.linspace(7.0, 11.0, 21)))
    assert noisy_new.median < noisy_old.median * 0.99
    assert not faster_beyond_noise(noisy_new, noisy_old)


def test_median_noise_is_half_the_order_statistic_interval_over_the_median():
    from kernel_forge.common.stats import median_noise

    ten = [float(x) for x in range(1, 11)]                     # median 5.5; 95 % interval x(2)..x(9)
    assert median_noise(ten) == pytest.approx((9 - 2) / (2 * 5.5))
    twenty = [float(x) for x in range(1, 21)]                  # x(6)..x(15)
    assert median_noise(twenty) == pytest.approx((15 - 6) / (2 * 10.5))
    assert median_noise([3.0] * 12) == 0.0
    assert median_noise([1.0, 2.0, 3.0, 4.0]) == float("inf")   # too few for an interval
    rng = np.random.default_rng(0)
    wide = median_noise(100 * (1 + 0.05 * rng.standard_normal(40)))
    narrow = median_noise(100 * (1 + 0.005 * rng.standard_normal(40)))
    assert narrow < 0.005 < wide
