"""kernel_forge/kinds/spatial.py: stencils, transposes, gathers and box filters, on probes built here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernel_forge.kinds.match import Match
from kernel_forge.kinds.spatial import (find_box_filter, find_gather, find_pool2d, find_resample, find_stencil,
                                        find_stencil1d, find_transpose)

from tests.support.kind_probes import probe

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "kinds"
RNG = np.random.default_rng(23)



def stencil(img: np.ndarray, taps: np.ndarray, clamp: bool) -> np.ndarray:
    """out[i, j] = sum of taps[dy, dx] * img[i + dy - r, j + dx - r], outside the image clamped or zero."""
    h, w = img.shape
    k = taps.shape[0]
    out = np.zeros_like(img)
    for i in range(h):
        for j in range(w):
            for dy in range(k):
                for dx in range(k):
                    y, x = i + dy - k // 2, j + dx - k // 2
                    if clamp:
                        y, x = min(max(y, 0), h - 1), min(max(x, 0), w - 1)
                    elif not (0 <= y < h and 0 <= x < w):
                        continue
                    out[i, j] += taps[dy, dx] * img[y, x]
    return out


def test_a_transpose_binds_the_input_s_rows_and_columns():
    x = RNG.standard_normal((3, 4))
    p = probe(ROOT / "manifests" / "transpose.json", {"x": x}, {"y": x.T}, rows=3, cols=4)
    assert list(find_transpose(p)) == [Match("transpose", {"x": "x", "y": "y", "rows": "rows", "cols": "cols"}, {})]


def test_a_blur_with_clamped_edges_and_no_taps_parameter_gets_its_taps_fitted():
    taps = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]]) / 16.0
    x = RNG.uniform(0.0, 1.0, (6, 7))
    p = probe(DATA / "blur3x3.json", {"x": x}, {"y": stencil(x, taps, clamp=True)}, h=6, w=7)
    m = next(find_stencil(p))
    assert (m.kind, m.binding) == ("stencil2d", {"x": "x", "y": "y", "taps": None, "rows": "h", "cols": "w"})
    assert (m.params["k"], m.params["edge"]) == (3, "clamp")
    assert m.params["taps"] == pytest.approx(taps.reshape(-1).tolist(), abs=1e-7)


def test_a_5x5_convolution_with_zero_edges_binds_its_filter_parameter():
    filt = RNG.standard_normal((5, 5))
    img = RNG.standard_normal((6, 7))
    p = probe(DATA / "conv5x5.json", {"img": img, "filt": filt}, {"out": stencil(img, filt, clamp=False)}, H=6, W=7)
    assert next(find_stencil(p)) == Match("stencil2d", {"x": "img", "y": "out", "taps": "filt", "rows": "H", "cols": "W"},
                                          {"k": 5, "edge": "zero"})


def test_rows_of_a_table_picked_by_index_are_a_gather_and_an_index_past_the_table_is_not():
    idx, table = np.array([7, 0, 999]), RNG.standard_normal((1000, 4))
    p = probe(DATA / "embedding.json", {"idx": idx, "table": table}, {"out": table[idx]}, n=3, dim=4)
    assert list(find_gather(p)) == [Match("gather", {"y": "out", "index": "idx", "table": "table", "rows": "n",
                                                     "cols": "dim"}, {})]
    outside = probe(DATA / "embedding.json", {"idx": np.array([7, 0, 1000]), "table": table}, {"out": table[idx]},
                    n=3, dim=4)
    assert list(find_gather(outside)) == []


def test_a_gather_plus_the_row_of_a_second_table_by_position_names_the_position_table_and_its_period():
    """llm.c's encoder: out[b, t] = wte[inp[b, t]] + wpe[t]."""
    inp, wte, wpe = np.array([[9, 1, 4], [4, 0, 2]]), RNG.standard_normal((10, 4)), RNG.standard_normal((3, 4))
    out = np.stack([[wte[inp[b, t]] + wpe[t] for t in range(3)] for b in range(2)])
    p = probe(ROOT / "bench" / "wild" / "llmc_encoder" / "llmc_encoder.json", {"inp": inp, "wte": wte, "wpe": wpe},
              {"out": out}, B=2, T=3, C=4, V=10)
    assert next(find_gather(p)) == Match("gather", {"y": "out", "index": "inp", "table": "wte", "rows": "B*T", "cols": "C",
                                                    "pos": "wpe", "period": "T"}, {})


def test_a_sum_along_each_row_with_zero_edges_and_its_radius_a_parameter_is_a_box_filter():
    src = RNG.uniform(0.0, 1.0, (4, 7))
    dst = np.array([[sum(src[i, j + d] for d in (-1, 0, 1) if 0 <= j + d < 7) for j in range(7)] for i in range(4)])
    p = probe(DATA / "box_rows.json", {"src": src}, {"dst": dst}, width=7, height=4, radius=1)
    assert list(find_box_filter(p)) == [Match("box_filter", {"x": "src", "y": "dst", "rows": "height", "cols": "width",
                                                             "radius": "radius"},
                                              {"axis": "x", "edge": "zero", "norm": "sum"})]


def test_rows_written_to_the_rows_an_index_names_are_a_scatter_and_a_negative_index_writes_nothing():
    cache, kv = RNG.standard_normal((9, 4)), RNG.standard_normal((3, 4))
    slot = np.array([7, -1, 2])                              # the second token is padding
    want = cache.copy()
    want[[7, 2]] = kv[[0, 2]]
    p = probe(DATA / "index_copy.json", {"cache": cache, "kv": kv, "slot": slot}, {"cache": want}, tokens=3, width=4)
    assert next(find_gather(p)) == Match("gather", {"y": "cache", "index": "slot", "table": "kv", "rows": "tokens",
                                                    "cols": "width"}, {"scatter": True})


def test_a_slot_written_twice_is_no_scatter():
    cache, kv, slot = RNG.standard_normal((9, 4)), RNG.standard_normal((3, 4)), np.array([5, 1, 5])
    want = cache.copy()
    want[slot] = kv
    p = probe(DATA / "index_copy.json", {"cache": cache, "kv": kv, "slot": slot}, {"cache": want}, tokens=3, width=4)
    assert [m for m in find_gather(p) if m.params.get("scatter")] == []


def test_nearest_upsampling_names_its_factor_and_a_smoothed_one_is_nothing():
    x = RNG.standard_normal((2, 3, 4, 5))
    path = DATA / "upsample_nearest2x.json"
    up = x.repeat(2, axis=2).repeat(2, axis=3)
    assert list(find_resample(probe(path, {"input": x}, {"output": up}, N=2, C=3, H=4, W=5))) == [
        Match("resample", {"x": "input", "y": "output", "planes": "N*C", "rows": "H", "cols": "W"},
              {"scale": 2, "mode": "nearest"})]
    smooth = up.copy()
    smooth[..., 1::2, :] = 0.5 * (up[..., 1::2, :] + np.roll(up, -1, axis=2)[..., 1::2, :])   # bilinear-like rows
    assert list(find_resample(probe(path, {"input": x}, {"output": smooth}, N=2, C=3, H=4, W=5))) == []


def _pool_loops(img: np.ndarray, k: int, s: int, p: int, op: str) -> np.ndarray:
    """Pooling written out loop by loop over each output's window, clipped to the image."""
    planes, h, w = img.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.zeros((planes, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = img[:, max(0, i * s - p):min(h, i * s - p + k), max(0, j * s - p):min(w, j * s - p + k)]
            vals = win.reshape(planes, -1)
            out[:, i, j] = {"max": vals.max(1), "mean": vals.sum(1) / (k * k), "mean_valid": vals.mean(1)}[op]
    return out


@pytest.mark.parametrize("k, s, p, op", [(3, 2, 1, "max"), (3, 2, 1, "mean"), (3, 1, 1, "mean_valid"), (2, 1, 0, "max"),
                                        (3, 1, 1, "max")])      # the last a 3 x 3 dilation
def test_pooling_with_a_stride_other_than_its_window_and_padding_names_window_stride_and_pad(tmp_path, k, s, p, op):
    import json

    d = json.loads((DATA / "maxpool2x2.json").read_text())      # maxpool2d(in, out, N, C, H, W)
    d["args"]["out"]["shape"] = ["N", "C", f"(H + {2 * p - k}) // {s} + 1", f"(W + {2 * p - k}) // {s} + 1"]
    d["reference"]["python"] = f"{DATA / 'refs.py'}:{d['reference']['python'].split(':')[1]}"
    path = tmp_path / "maxpool2d.json"
    path.write_text(json.dumps(d))
    x = RNG.standard_normal((2, 3, 9, 11))
    got = _pool_loops(x.reshape(6, 9, 11), k, s, p, op)
    found = list(find_pool2d(probe(path, {"in": x}, {"out": got}, N=2, C=3, H=9, W=11)))
    assert found and found[0] == Match("pool2d", {"x": "in", "y": "out", "planes": "N*C", "rows": "H", "cols": "W"},
                                       {"window": k, "stride": s, "pad": p, "op": op}), found[:2]
    # the padding counted in a mean, or not, tells the two apart
    other = {"mean": "mean_valid", "mean_valid": "mean"}.get(op)
    if other:
        assert all(m.params["op"] != other for m in find_pool2d(probe(path, {"in": x}, {"out": got}, N=2, C=3, H=9, W=11)))


def _conv_rows(img: np.ndarray, taps: np.ndarray, edge: str) -> np.ndarray:
    """Each row of img convolved (correlated) with taps, loop by loop: out[r, i] = sum_j taps[j] *
    img[r, i - k//2 + j] under the edge mode, or img[r, i + j] for ``valid``'s n - k + 1 outputs."""
    rows, n = img.shape
    k = len(taps)
    m = n - k + 1 if edge == "valid" else n
    out = np.zeros((rows, m))
    for r in range(rows):
        for i in range(m):
            for j in range(k):
                t = i + j if edge == "valid" else i - k // 2 + j
                if edge == "clamp":
                    t = min(max(t, 0), n - 1)
                elif edge == "reflect":
                    t = -t if t < 0 else (2 * n - 2 - t if t >= n else t)
                elif not 0 <= t < n:
                    continue
                out[r, i] += taps[j] * img[r, t]
    return out


def test_a_1d_convolution_binds_its_mask_and_its_width_and_a_reversed_mask_is_a_flip():
    x, m = RNG.standard_normal(40), RNG.standard_normal(5)
    path = DATA / "convolution_1D_basic_kernel.json"
    got = list(find_stencil1d(probe(path, {"N": x, "M": m}, {"P": _conv_rows(x[None], m, "zero")[0]},
                                    width=40, mask=5)))
    assert got[0] == Match("stencil1d", {"x": "N", "y": "P", "taps": "M", "rows": None, "cols": "Width", "k": "Mask_Width"},
                           {"k": 5, "edge": "zero", "flip": False})
    flipped = list(find_stencil1d(probe(path, {"N": x, "M": m}, {"P": _conv_rows(x[None], m[::-1], "zero")[0]},
                                        width=40, mask=5)))
    assert flipped[0].params == {"k": 5, "edge": "zero", "flip": True}
    # the output of another mask: not M's, but constant taps (fitted); its absolute value: nothing
    [fitted] = find_stencil1d(probe(path, {"N": x, "M": m + 0.5}, {"P": _conv_rows(x[None], m, "zero")[0]},
                                    width=40, mask=5))
    assert fitted.binding["taps"] is None and np.allclose(fitted.params["taps"], m, atol=1e-6)
    assert list(find_stencil1d(probe(path, {"N": x, "M": m}, {"P": np.abs(_conv_rows(x[None], m, "zero")[0])},
                                     width=40, mask=5))) == []


def test_a_fitted_1d_stencil_names_its_taps_and_edge_and_a_nonlinear_window_is_nothing():
    img = RNG.standard_normal((3, 30))
    path = DATA / "smooth_rows.json"
    taps = np.array([0.25, 0.5, 0.25])
    for edge in ("clamp", "reflect"):
        [m] = find_stencil1d(probe(path, {"src": img}, {"dst": _conv_rows(img, taps, edge)}, rows=3, n=30))
        assert (m.binding, m.params) == ({"x": "src", "y": "dst", "taps": None, "rows": "rows", "cols": "n", "k": None},
                                         {"k": 3, "edge": edge, "flip": False, "taps": [0.25, 0.5, 0.25]})
    # one-sided: a backward difference keeps x's length with a zero last tap
    [m] = find_stencil1d(probe(path, {"src": img}, {"dst": _conv_rows(img, np.array([-1.0, 1.0, 0.0]), "zero")},
                               rows=3, n=30))
    assert m.params["taps"] == [-1.0, 1.0, 0.0] and m.params["edge"] == "zero"
    running_max = np.maximum(np.maximum(img, np.roll(img, 1, axis=1)), np.roll(img, -1, axis=1))
    assert list(find_stencil1d(probe(path, {"src": img}, {"dst": running_max}, rows=3, n=30))) == []


def test_a_valid_1d_stencil_has_n_minus_k_plus_1_outputs():
    sig, kern = RNG.standard_normal(50), RNG.standard_normal(6)
    path = DATA / "correlate_valid.json"
    out = np.convolve(sig, kern, mode="valid")
    [m] = find_stencil1d(probe(path, {"signal": sig, "kernel": kern}, {"out": out}, n=50, k=6))
    assert m.binding == {"x": "signal", "y": "out", "taps": "kernel", "rows": None, "cols": "n", "k": "k"}
    assert m.params == {"k": 6, "edge": "valid", "flip": True}
