"""bench/quick_vs_full.py's arithmetic (the GPU part runs in bench/evidence/h200-2026-12-02-s6/a/device_gate.sh): the noise band
and the table that says whether --quick and the full gate agree."""
from __future__ import annotations

import pytest

from tests.support.bench_scripts import bench_script
from tests.support.paths import ROOT

qvf = bench_script("quick_vs_full")


def test_the_band_is_at_least_one_percent_and_widens_with_noise_and_spread():
    assert qvf.band([100.0, 100.1], [100.0, 100.05], [0.001, 0.002]) == pytest.approx(0.01)
    assert qvf.band([100.0], [100.0], [0.02, float("inf")]) == pytest.approx(0.04)
    assert qvf.band([100.0, 106.0], [100.0], [0.0]) == pytest.approx(0.06 / 1.03, rel=1e-3)


def test_the_table_flags_disagreement_and_failures():
    rows = [{"task": "vector_add", "kernel": "initial", "full_us": 100.0, "quick_us": 100.4, "ratio": 1.004,
             "band": 0.01, "agrees": True, "failures": []},
            {"task": "matmul_f32", "kernel": "initial", "full_us": 32.7, "quick_us": 23.5, "ratio": 0.719,
             "band": 0.01, "agrees": False, "failures": []},
            {"task": "histogram", "kernel": "histogram_shared", "full_us": None, "quick_us": None, "ratio": None,
             "band": None, "agrees": False, "failures": ["full: mismatch: case odd"]}]
    text = qvf.table(rows)
    assert "| vector_add | initial | 100.00 | 100.40 | 1.0040 | ±1.0 % | yes |" in text
    assert "| 0.7190 | ±1.0 % | NO |" in text and "no: full: mismatch" in text
    assert text.endswith("1 of 3 kernels agree within their noise band.")


def test_every_bundled_task_contributes_its_initial_kernel_and_templates():
    from kernel_forge.model.task import load_task

    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    labels = [label for label, _ in qvf.kernels_of(task)]
    assert labels[0] == "initial" and {"matmul_f32_regblock", "matmul_f32_tiled"} <= set(labels)
