"""kforge eval's table: the error columns (no GPU)."""
from __future__ import annotations

import numpy as np

from kernel_forge.common.dtypes import FLOAT32
from kernel_forge.reports.evaluation_text import eval_table, worst_of_tolerance
from kernel_forge.common.stats import summarize
from kernel_forge.model.task import Tolerance, load_task
from kernel_forge.model.verdict import CaseResult, Evaluation
from kernel_forge.model.tolerance import compare

from tests.support.paths import ROOT


def test_the_table_shows_how_much_of_its_tolerance_the_worst_element_used():
    task = load_task(ROOT / "manifests" / "vector_add.json")
    tol = Tolerance(1e-3, 1e-3)
    expected = np.array([1e-300, 1.0, 2.0])                 # a reference near zero, as in a 4096^3 case
    actual = (expected + np.array([5e-4, 0.0, 1e-3])).astype(np.float32)
    chk = compare("c", actual, expected, FLOAT32, tol)
    assert chk.ok
    case = CaseResult("n16M", "performance", True, outputs=[chk.to_json()], timing=summarize([10.0, 11.0]))
    ev = Evaluation("k.cu", True, cases=[case], score_us=10.5)
    table = eval_table(task, ev, None, {})
    head, _rule, row = table.splitlines()[:3]
    assert "worst/tol" in head
    assert "1.71e+300" not in table and "e+30" not in row         # no relative error against 1e-300
    cells = row.split()
    assert cells[:3] == ["n16M", "performance", "pass"]
    assert float(cells[5]) == round(chk.tol_ratio, 2) and 0.3 < chk.tol_ratio < 0.6


def test_worst_of_tolerance_reads_numbers_and_their_text():
    assert worst_of_tolerance([{"tol_ratio": 0.25}, {"tol_ratio": "inf"}]) == float("inf")
    assert worst_of_tolerance([{"tol_ratio": 0.5}, {}]) == 0.5
    assert worst_of_tolerance([{"max_abs": 1.0}]) is None
