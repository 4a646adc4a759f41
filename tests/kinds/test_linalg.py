"""kernel_forge/kinds/linalg.py: the matrix-product and histogram hypotheses, on probes built here."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from kernel_forge.kinds.linalg import find_gemm, find_histogram
from kernel_forge.kinds.match import Match

from tests.support.kind_probes import probe

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(5)



def test_a_plain_matrix_product_binds_each_operand_and_size():
    a, b = RNG.standard_normal((3, 5)), RNG.standard_normal((5, 4))
    p = probe(ROOT / "manifests" / "matmul_f32.json", {"a": a, "b": b}, {"c": a @ b}, m=3, n=4, k=5)
    assert next(find_gemm(p)) == Match("gemm", {"a": "a", "b": "b", "c": "c", "m": "m", "n": "n", "k": "k",
                                                "alpha": None, "beta": None, "bias": None},
                                       {"trans_a": False, "trans_b": False})


def test_alpha_beta_and_a_transposed_a_are_read_off_the_values():
    """sgemm_tn: C = alpha * A^T @ B + beta * C, with A stored k x m (alpha 1.5, beta -0.5 in the manifest)."""
    A, B, C = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 4)), RNG.standard_normal((3, 4))
    p = probe(ROOT / "tests" / "data" / "kinds" / "sgemm_tn.json", {"A": A, "B": B, "C": C},
              {"C": 1.5 * A.T @ B - 0.5 * C}, m=3, n=4, k=5)
    m = next(find_gemm(p))
    assert (m.binding["alpha"], m.binding["beta"], m.binding["bias"]) == ("alpha", "beta", None)
    assert (m.binding["a"], m.binding["b"], m.binding["c"]) == ("A", "B", "C")
    assert m.params == {"trans_a": True, "trans_b": False}


def test_a_product_that_is_not_what_the_reference_wrote_is_no_gemm():
    a, b = RNG.standard_normal((3, 5)), RNG.standard_normal((5, 4))
    p = probe(ROOT / "manifests" / "matmul_f32.json", {"a": a, "b": b}, {"c": a @ b + 1.0}, m=3, n=4, k=5)
    assert list(find_gemm(p)) == []


def test_a_histogram_that_skips_values_outside_the_bins_is_read_as_ignore():
    x = np.array([0, 1, 1, 3, -2, 7])          # -2 and 7 fall outside 4 bins
    p = probe(ROOT / "manifests" / "histogram.json", {"x": x, "bins": np.zeros(4)}, {"bins": [1, 2, 0, 1]},
              n=6, nbins=4)
    assert list(find_histogram(p)) == [Match("histogram", {"x": "x", "bins": "bins", "n": "n", "nbins": "nbins"},
                                             {"index": "ignore"})]


def test_a_histogram_of_values_modulo_the_bin_count_is_read_as_modulo():
    x = np.array([0, 1, 1, 3, 6, 7])           # mod 4: 0 1 1 3 2 3
    p = probe(ROOT / "manifests" / "histogram.json", {"x": x, "bins": np.zeros(4)}, {"bins": [1, 2, 1, 2]},
              n=6, nbins=4)
    assert [m.params["index"] for m in find_histogram(p)] == ["modulo"]


def test_values_all_inside_the_bins_are_counted_directly_and_named_once():
    x = np.array([0, 1, 1, 3])
    p = probe(ROOT / "manifests" / "histogram.json", {"x": x, "bins": np.zeros(5)}, {"bins": [1, 2, 0, 1, 0]},
              n=4, nbins=5)
    assert [m.params["index"] for m in find_histogram(p)] == ["direct", "modulo"]   # x % 5 is x itself


def test_a_square_product_of_one_size_parameter_binds_it_to_m_n_and_k():
    """A tutorial's matMul(A, B, C, N): one parameter is every size (it was refused as used twice)."""
    a, b = RNG.standard_normal((6, 6)), RNG.standard_normal((6, 6))
    p = probe(ROOT / "manifests" / "matmul_f32.json", {"a": a, "b": b}, {"c": a @ b}, m=6, n=6, k=6)
    m = next(find_gemm(p))
    assert (m.binding["a"], m.binding["b"], m.params["trans_a"], m.params["trans_b"]) == ("a", "b", False, False)
    assert {m.binding["m"], m.binding["n"], m.binding["k"]} <= {"m", "n", "k"}


def test_a_batch_of_products_binds_the_batch_and_a_product_of_the_matrices_alone_is_not_one():
    A, B = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((3, 5, 2))
    data = ROOT / "tests" / "data" / "kinds" / "bmm_f32.json"
    p = probe(data, {"A": A, "B": B}, {"C": A @ B}, batch=3, M=4, N=2, K=5)
    assert next(find_gemm(p)) == Match("gemm", {"a": "A", "b": "B", "c": "C", "m": "M", "n": "N", "k": "K",
                                                "alpha": None, "beta": None, "bias": None, "batch": "batch"},
                                       {"trans_a": False, "trans_b": False})
    mixed = A[[1, 2, 0]] @ B                      # the batches paired wrongly: no hypothesis holds
    assert list(find_gemm(probe(data, {"A": A, "B": B}, {"C": mixed}, batch=3, M=4, N=2, K=5))) == []


HISTC = ROOT / "tests" / "data" / "kinds" / "histc_f32.json"      # min_val -2.5, max_val 3.0


def _histc(x, counts, nbins):
    return probe(HISTC, {"input": x}, {"hist": counts}, n=len(x), nbins=nbins)


def test_real_values_in_equal_bins_of_a_range_skip_the_outside_and_count_the_end_in_the_last_bin():
    x = np.array([-3.0, -2.5, -0.1, 0.3, 2.9, 3.0, 4.0])       # 5 bins of 1.1: -2.5 -1.4 -0.3 0.8 1.9 3.0
    [m] = find_histogram(_histc(x, [1, 0, 2, 0, 2], 5))
    assert m.binding == {"x": "input", "bins": "hist", "n": "n", "nbins": "nbins", "lo": "min_val", "hi": "max_val"}
    assert (m.params["index"], m.params["edge"], m.params["outside"]) == ("range", "closed", "skip")


def test_a_range_s_end_skipped_and_the_outside_clamped_are_told_apart():
    x = np.array([-3.0, -2.5, -0.1, 0.3, 2.9, 3.0, 4.0])
    [m] = find_histogram(_histc(x, [1, 0, 2, 0, 1], 5))         # 3.0 itself skipped: [lo, hi)
    assert (m.params["edge"], m.params["outside"]) == ("open", "skip")
    [m] = find_histogram(_histc(x, [2, 0, 2, 0, 3], 5))         # -3.0 in the first bin, 3.0 and 4.0 in the last
    assert m.params["outside"] == "clamp"


def test_bins_of_a_width_from_a_start_are_read_as_width():
    """histogram(x, lo, width): bin floor((v - lo) / width); here -2.5 and 3.0 as lo and a width."""
    x = np.array([-2.4, 0.4, 0.6, 3.6, 7.0])                    # bins [-2.5, 0.5) [0.5, 3.5) [3.5, 6.5)
    [m] = find_histogram(_histc(x, [2, 1, 1], 3))
    assert (m.binding["lo"], m.binding["width"], m.params["index"]) == ("min_val", "max_val", "width")


def test_counts_of_another_range_or_not_whole_numbers_are_no_histogram():
    x = np.array([-2.4, -1.2, 0.4, 0.6, 2.0])      # [-2.5, 3.0] in 4 bins: 2 0 2 1
    assert list(find_histogram(_histc(x, [1, 1, 2, 1], 4))) == []        # bins of [-2.4, 2.0]: no range given
    assert len(list(find_histogram(_histc(x, [2, 0, 2, 1], 4)))) == 1
    assert list(find_histogram(_histc(x, [2.5, 0, 2.5, 0], 4))) == []
