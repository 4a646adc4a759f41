"""kernel_forge/kinds/rows.py: row norms, softmax, reductions and prefix sums, on probes built here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernel_forge.kinds.match import Match
from kernel_forge.kinds.rows import _segments, find_reductions, find_row_norm, find_row_softmax, find_scan

from tests.support.kind_probes import probe

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS, DATA = ROOT / "manifests", ROOT / "tests" / "data" / "kinds"
RNG = np.random.default_rng(17)



def _layernorm_inputs():
    return RNG.normal(0.5, 2.0, (3, 8)), RNG.normal(1.0, 0.5, 8), RNG.normal(0.0, 0.5, 8)


def test_a_layer_norm_with_weight_and_bias_binds_them_and_its_epsilon_parameter():
    x, gamma, beta = _layernorm_inputs()
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    y = (x - mean) / np.sqrt(var + 1e-5) * gamma + beta
    p = probe(MANIFESTS / "layernorm.json", {"x": x, "gamma": gamma, "beta": beta}, {"y": y}, rows=3, cols=8)
    assert next(find_row_norm(p)) == Match("row_norm", {
        "x": "x", "y": "y", "weight": "gamma", "bias": "beta", "mean": None, "rstd": None, "var": None,
        "rows": "rows", "cols": "cols", "eps": "eps"}, {"norm": "layer"})


def test_an_rms_norm_has_no_mean_taken_out_and_here_no_bias():
    x, gamma, _ = _layernorm_inputs()
    y = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5) * gamma
    p = probe(MANIFESTS / "layernorm.json", {"x": x, "gamma": gamma, "beta": np.zeros(8) + 3.0}, {"y": y},
              rows=3, cols=8)
    m = next(find_row_norm(p))
    assert m.params == {"norm": "rms"} and (m.binding["weight"], m.binding["bias"]) == ("gamma", None)


def test_a_norm_of_a_sum_no_output_keeps_is_a_row_norm_with_a_residual_and_no_sum():
    """out = rms_norm(x + res) * weight, the sum not written: the binding names res, and sum None
    (the fused_add_rms_norm tasks cover the sum written in place)."""
    x, gamma, res = RNG.normal(0.5, 2.0, (3, 8)), RNG.normal(1.0, 0.5, 8), RNG.normal(0.0, 1.0, (3, 8))

    def reference(x, res):
        z = (x + res).reshape(3, 8)
        return z / np.sqrt((z * z).mean(axis=1, keepdims=True) + 1e-5) * gamma

    p = probe(DATA / "bias_gelu_residual.json", {"x": x, "bias": gamma, "res": res}, {"out": reference(x, res)},
              rows=3, cols=8)
    p.rerun = lambda changes: {"out": reference(changes.get("x", x), changes.get("res", res)).reshape(-1)}
    m = next(find_row_norm(p))
    assert (m.binding["x"], m.binding["res"], m.binding["sum"], m.binding["weight"]) in (
        ("x", "res", None, "bias"), ("res", "x", None, "bias"))
    assert m.params == {"norm": "rms", "eps": 1e-5}


@pytest.mark.parametrize("is_norm", [False, True])
def test_a_product_of_one_row_whose_rms_is_one_is_not_an_rms_norm_unless_scaling_x_leaves_it(is_norm):
    """``c = a * b`` over one row of values whose RMS is 1: the RMS norm of a weighted by b holds on the
    values (cuda-samples' modulate kernel read so); the reference run on 2.5 * a tells a map (its
    output scales) from a norm (it stays)."""
    a, b = RNG.standard_normal(512), RNG.standard_normal(512)
    a /= np.sqrt(np.mean(a * a))
    ref = (lambda a: a / np.sqrt(np.mean(a * a) + 1e-6) * b) if is_norm else (lambda a: a * b)
    p = probe(MANIFESTS / "vector_add.json", {"a": a, "b": b}, {"c": ref(a)}, n=512)
    p.rerun = lambda changes: {"c": ref(changes.get("a", a))}
    found = [m for m in find_row_norm(p) if m.binding["x"] == "a"]
    assert bool(found) == is_norm
    if is_norm:
        assert found[0].params["norm"] == "rms" and found[0].binding["weight"] == "b"


def test_a_row_scaled_to_unit_length_is_an_l2_norm_not_an_rms_norm():
    def reference(x):
        x = x.reshape(3, 8)
        return x / np.maximum(np.sqrt((x * x).sum(axis=1, keepdims=True)), 1e-12)

    x = RNG.normal(0.5, 2.0, (3, 8))
    p = probe(DATA / "l2_normalize.json", {"x": x}, {"out": reference(x)}, rows=3, cols=8)
    p.rerun = lambda changes: {"out": reference(changes["x"]).reshape(-1)}
    m = next(find_row_norm(p))
    assert m.params == {"norm": "l2", "eps": 1e-12} and m.binding["weight"] is None


def test_softmax_and_log_softmax_of_each_row_are_told_apart():
    x = RNG.uniform(-5.0, 5.0, (3, 5))
    lse = np.log(np.exp(x).sum(axis=1, keepdims=True))
    for y, log in ((np.exp(x - lse), False), (x - lse, True)):
        p = probe(MANIFESTS / "softmax_rows.json", {"x": x}, {"y": y}, rows=3, cols=5)
        assert list(find_row_softmax(p)) == [Match("row_softmax", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"},
                                                   {"log": log})]


def test_a_whole_reduction_names_its_operation():
    x = RNG.standard_normal(10)
    p = probe(DATA / "reduce_max.json", {"in": x}, {"out": [x.max()]}, n=10)
    p.rerun = lambda changes: {"out": np.array([changes["in"].max()])}
    assert next(find_reductions(p)) == Match("reduction", {"x": "in", "y": "out", "n": "n"}, {"op": "max", "axis": None})


def test_an_absmax_whose_largest_magnitude_is_positive_is_told_from_a_max_by_running_on_minus_x():
    """Half the time a tensor's largest magnitude is a positive value: max(x) == max(|x|) on the
    probe.  The reference run again on -x answers which one it computes."""
    x = RNG.standard_normal(10)
    x[np.argmax(np.abs(x))] = 9.0                          # the largest magnitude positive: both hold
    p = probe(DATA / "reduce_max.json", {"in": x}, {"out": [9.0]}, n=10)
    p.rerun = lambda changes: {"out": np.array([np.abs(changes["in"]).max()])}
    assert next(find_reductions(p)) == Match("reduction", {"x": "in", "y": "out", "n": "n"},
                                             {"op": "max", "axis": None, "pre": "abs"})


@pytest.mark.parametrize("adds", [True, False])
def test_whether_a_reduction_adds_to_its_start_is_read_from_a_rerun_not_from_a_small_start(tmp_path, adds):
    """global_norm's ``out[0] += sum(x * x)`` from a start of ~1 against a sum of ~400: the start is
    within close()'s tolerance either way, so the reference is run again with a higher start."""
    import json
    m = json.loads((DATA / "reduce_max.json").read_text())
    m["args"]["out"]["init"] = "normal"                    # in/out: it may be added to
    m["reference"]["python"] = str(DATA / "refs.py") + ":reduce_max"
    (tmp_path / "t.json").write_text(json.dumps(m))
    x, start = RNG.standard_normal(400), RNG.standard_normal(1)
    ref = lambda x, start: start + np.sum(x * x) if adds else np.array([np.sum(x * x)])   # noqa: E731
    p = probe(tmp_path / "t.json", {"in": x, "out": start}, {"out": ref(x, start)}, n=400)
    p.rerun = lambda changes: {"out": ref(changes.get("in", x), changes.get("out", start))}
    found = next(find_reductions(p))
    assert found.params == {"op": "sum", "axis": None, "pre": "square", **({"accumulate": True} if adds else {})}


def test_column_sums_of_a_batch_of_rows_are_a_column_reduction_over_a_product_of_sizes():
    dout = RNG.standard_normal((2, 3, 4))
    p = probe(DATA / "bias_backward.json", {"dout": dout}, {"dbias": dout.reshape(6, 4).sum(axis=0)}, B=2, T=3, OC=4)
    assert next(find_reductions(p)) == Match("column_reduction", {"x": "dout", "y": "dbias", "rows": "B*T", "cols": "OC"},
                                             {"op": "sum"})


def test_a_sum_per_512_values_the_last_segment_short_is_a_row_reduction_over_segments():
    x = RNG.standard_normal(1030)                  # segments of 512, 512 and 6 values
    sums = [x[:512].sum(), x[512:1024].sum(), x[1024:].sum()]
    p = probe(ROOT / "bench" / "wild" / "cs_reduction" / "cs_reduction.json", {"g_idata": x}, {"g_odata": sums}, n=1030)
    assert list(find_reductions(p)) == [Match("row_reduction", {"x": "g_idata", "y": "g_odata", "n": "n"},
                                              {"op": "sum", "segment": 512})]

    # the segment lengths tried: powers of two that give that many segments
    assert (_segments(1030, 3), _segments(1000, 2), _segments(5, 3)) == ([512], [512], [2])


def test_a_sum_per_segment_is_not_read_where_another_case_declares_fewer_sums_than_segments(tmp_path):
    """cuda-samples' reduce6 writes one sum per block of a grid capped at 64 blocks: on the small case a
    sum per 512 values, on a larger one 64 sums of many values each.  The cases' declared shapes say so."""
    import json
    m = json.loads((ROOT / "bench" / "wild" / "cs_reduction" / "cs_reduction.json").read_text())
    m["args"]["g_odata"]["shape"] = ["min(64, cdiv(n, 512))"]
    m["reference"]["python"] = str(ROOT / "bench" / "wild" / "cs_reduction" / "reference.py") + ":reference"
    m["initial"] = str(ROOT / "bench" / "wild" / "cs_reduction" / "naive.cu")
    (tmp_path / "r6.json").write_text(json.dumps(m))
    x = RNG.standard_normal(1030)
    p = probe(tmp_path / "r6.json", {"g_idata": x}, {"g_odata": [x[:512].sum(), x[512:1024].sum(), x[1024:].sum()]},
              n=1030)
    assert not any(f.params.get("segment") for f in find_reductions(p))


def test_a_sum_per_512_values_is_found_when_the_probed_size_is_a_multiple_of_512():
    x = RNG.standard_normal(1024)                  # two full segments: no short one to give the length away
    p = probe(ROOT / "bench" / "wild" / "cs_reduction" / "cs_reduction.json", {"g_idata": x},
              {"g_odata": [x[:512].sum(), x[512:].sum()]}, n=1024)
    assert list(find_reductions(p)) == [Match("row_reduction", {"x": "g_idata", "y": "g_odata", "n": "n"},
                                              {"op": "sum", "segment": 512})]
    # a split that a scalar already gives (rows of 512 values) is a row reduction there, not tried twice
    assert (_segments(1024, 2), _segments(1024, 2, {(2, 512)})) == ([512], [])


def test_prefix_sums_of_the_whole_array_and_of_each_row_inclusive_or_exclusive():
    v = RNG.uniform(0.0, 1.0, 6)
    p = probe(DATA / "exclusive_scan.json", {"in": v}, {"out": np.cumsum(v) - v}, n=6)
    assert list(find_scan(p)) == [Match("scan", {"x": "in", "y": "out", "n": "n"},
                                        {"exclusive": True, "per_row": False})]
    x = RNG.uniform(0.0, 1.0, (3, 4))
    p = probe(DATA / "cumsum_rows.json", {"x": x}, {"y": np.cumsum(x, axis=1)}, rows=3, cols=4)
    assert list(find_scan(p)) == [Match("scan", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"},
                                        {"exclusive": False, "per_row": True})]


def _softmax(v, axis):
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_a_softmax_over_the_middle_axis_of_nchw_binds_outer_axis_and_inner():
    x = RNG.standard_normal((2, 3, 4, 5))
    p = probe(DATA / "seg_softmax_nchw.json", {"logits": x}, {"probs": _softmax(x, 1)}, N=2, C=3, H=4, W=5)
    [m] = find_row_softmax(p)
    assert m == Match("row_softmax", {"x": "logits", "y": "probs", "axis": "C", "inner": "H*W", "outer": "N"},
                      {"log": False, "dim": "middle"})
    # over H (the third axis) is a softmax of N*C blocks of H values W apart; over W it is a row softmax
    [m] = find_row_softmax(probe(DATA / "seg_softmax_nchw.json", {"logits": x}, {"probs": _softmax(x, 2)},
                                 N=2, C=3, H=4, W=5))
    assert (m.binding["axis"], m.binding["inner"], m.binding["outer"]) == ("H", "W", "N*C")
    assert [m.params for m in find_row_softmax(probe(DATA / "seg_softmax_nchw.json", {"logits": x},
                                                     {"probs": _softmax(x, 3)}, N=2, C=3, H=4, W=5))][0] == {"log": False}


def test_a_column_log_softmax_has_no_outer_and_a_softmax_over_no_axis_is_nothing():
    x = RNG.standard_normal((6, 4))
    p = probe(DATA / "column_log_softmax.json", {"in": x}, {"out": np.log(_softmax(x, 0))}, rows=6, cols=4)
    assert list(find_row_softmax(p)) == [Match("row_softmax", {"x": "in", "y": "out", "axis": "rows", "inner": "cols",
                                                               "outer": None}, {"log": True, "dim": "middle"})]
    whole = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    assert list(find_row_softmax(probe(DATA / "column_log_softmax.json", {"in": x}, {"out": whole},
                                       rows=6, cols=4))) == []


def _group_norm(x, groups, w, b, eps=1e-5):
    n, c, hw = x.shape
    v = x.reshape(n, groups, -1)
    z = ((v - v.mean(axis=2, keepdims=True)) / np.sqrt(v.var(axis=2, keepdims=True) + eps)).reshape(n, c, hw)
    return z * w[None, :, None] + b[None, :, None]


def test_a_group_norm_and_an_instance_norm_of_the_same_tensor_are_told_apart_by_their_groups():
    x, w, b = RNG.standard_normal((2, 6, 5)), RNG.uniform(0.5, 1.5, 6), RNG.standard_normal(6)
    path = DATA / "group_norm_nchw.json"
    for groups, name in ((3, "G"), (6, "C")):
        stats = x.reshape(2, 3, -1)          # the (sample, group) statistics of G = 3, an output each
        outs = {"y": _group_norm(x, groups, w, b), "mean": stats.mean(axis=2),
                "rstd": 1.0 / np.sqrt(stats.var(axis=2) + 1e-5)}
        p = probe(path, {"x": x, "gamma": w, "beta": b}, outs, N=2, C=6, HW=5, G=3)
        found = [m for m in find_row_norm(p) if m.params.get("group")]
        if groups == 3:
            assert found and found[0].binding["groups"] == "G" and found[0].binding["mean"] == "mean"
        else:
            assert found == []                # per channel is not G = 3's groups, and mean / rstd (N x G) cannot hold N x C
