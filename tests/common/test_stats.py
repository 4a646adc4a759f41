"""Tests of kernel_forge/common/stats.py: timing statistics, the geometric mean and the noise of a median."""
from __future__ import annotations

import numpy as np
import pytest

from kernel_forge.common.stats import (Timing, faster_beyond_noise, geomean, median_uncertainty, noise_band,
                                       summarize)


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


def test_the_median_s_uncertainty_is_its_interval_or_the_drift_between_rounds_whichever_is_wider():
    ten = summarize([float(x) for x in range(1, 11)])          # median 5.5, interval x(2)..x(9): 7 / 11
    assert median_uncertainty(ten) == pytest.approx(7 / 11)
    steady = summarize([10.0] * 12, round_medians=[9.0, 11.0])   # no spread, but the rounds differ by 2
    assert median_uncertainty(steady) == pytest.approx(2 / (2 * 10.0))
    assert median_uncertainty(summarize([10.0] * 12, round_medians=[10.0])) == 0.0    # one round: no drift
    # below 5 samples: half the whole range stands in for the interval
    assert median_uncertainty(summarize([8.0, 10.0, 12.0])) == pytest.approx(4 / (2 * 10.0))
