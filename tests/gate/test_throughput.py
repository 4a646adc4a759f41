"""Tests of kernel_forge/gate/throughput.py: a timed case's rates from the task's cost expressions."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernel_forge.common.stats import summarize
from kernel_forge.gate.throughput import fill_throughput
from kernel_forge.model.task import load_task
from kernel_forge.model.verdict import CaseResult

ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = load_task(ROOT / "manifests" / "vector_add.json")     # cost: flops n, bytes 12*n
N16M = VECTOR_ADD.case("n16M")                                       # n = 16,777,216


def timed(median_us: float) -> CaseResult:
    return CaseResult(name="n16M", role="performance", passed=True, timing=summarize([median_us] * 3))


def test_rates_and_shares_of_the_peaks_come_from_the_cost_and_the_median():
    res = timed(100.0)
    fill_throughput(VECTOR_ADD, N16M, res, lambda: {"bandwidth": 4e12, "fp32_peak": 50e12})
    n = 16_777_216
    assert (res.flops, res.bytes) == (n, 12 * n)
    # 12 n bytes in 100 µs: 2,013.27 GB/s, half of a 4 TB/s copy bandwidth and a bit more
    assert res.gbps == pytest.approx(12 * n / 100e-6 / 1e9) == pytest.approx(2013.26592)
    assert res.pct_peak_bw == pytest.approx(100 * 12 * n / 100e-6 / 4e12) == pytest.approx(50.331648)
    assert res.tflops == pytest.approx(n / 100e-6 / 1e12) == pytest.approx(0.16777216)
    assert res.pct_peak_flops == pytest.approx(100 * n / 100e-6 / 50e12) == pytest.approx(0.33554432)


def test_a_zero_median_gets_its_cost_but_no_rates_and_never_asks_for_a_calibration():
    res = timed(0.0)
    fill_throughput(VECTOR_ADD, N16M, res, lambda: pytest.fail("calibrate was asked for a time of zero"))
    assert (res.flops, res.bytes) == (16_777_216, 12 * 16_777_216)
    assert res.gbps is res.tflops is res.pct_peak_bw is res.pct_peak_flops is None


def test_without_a_measured_peak_the_rates_stay_and_the_shares_are_left_out():
    res = timed(50.0)
    fill_throughput(VECTOR_ADD, N16M, res, lambda: {"bandwidth": 0, "fp32_peak": None})
    assert res.gbps == pytest.approx(12 * 16_777_216 / 50e-6 / 1e9)
    assert res.tflops == pytest.approx(16_777_216 / 50e-6 / 1e12)
    assert res.pct_peak_bw is None and res.pct_peak_flops is None


def test_a_task_without_a_cost_has_no_rates():
    bare = replace(VECTOR_ADD, flops=None, bytes=None)
    res = timed(100.0)
    fill_throughput(bare, N16M, res, lambda: {"bandwidth": 4e12, "fp32_peak": 50e12})
    assert res.flops is res.bytes is res.gbps is res.tflops is None
    assert res.pct_peak_bw is None and res.pct_peak_flops is None
