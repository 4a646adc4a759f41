"""kernel_forge.reports.heatmap: the attempts x cases matrix of heatmap.png and the picture drawn from it."""
from __future__ import annotations

import pytest

from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.reports.heatmap import MAX_ROWS, draw_heatmap, matrix


def case(name, role, passed=True, median=None, reason=None):
    return {"name": name, "role": role, "passed": passed, "reason": reason,
            "timing": {"median": median} if median is not None else None}


def attempt(aid, cases, status="passed", reason=None, **kw):
    return {"id": aid, "status": status, "reason": reason, "evaluation": {"cases": cases}, **kw}


SUMMARY = {"task": "t", "initial": {"id": "a0000"}, "best": {"id": "a0002"}}
ATTEMPTS = [
    attempt("a0000", [case("p1", "performance", median=100.0), case("odd", "correctness"),
                      case("p2", "performance", median=200.0), case("hidden", "holdout")], proposer="initial"),
    attempt("a0001", [], status="failed", reason="compile_error"),
    attempt("a0002", [case("odd", "correctness"), case("p1", "performance", median=50.0),
                      case("p2", "performance")], holdout={"passed": True}),
    attempt("a0003", [case("odd", "correctness", passed=False, reason="mismatch"),
                      case("p1", "performance", passed=False, reason="skipped"),
                      case("p2", "performance", median=400.0)], status="failed", reason="mismatch",
            holdout={"passed": False}),
    {"id": "a0004", "status": "pending", "evaluation": None},
]


def test_each_gated_attempt_is_a_row_and_each_shown_case_a_column_correctness_first_then_the_holdout():
    rows, columns, _ = matrix(SUMMARY, ATTEMPTS)
    assert [r["id"] for r in rows] == ["a0000", "a0001", "a0002", "a0003"]          # a0004 was never gated
    assert columns == [("odd", "correctness"), ("p1", "performance"), ("p2", "performance"), ("holdout", "holdout")]


def test_a_cell_is_the_speedup_against_the_baseline_a_pass_a_failure_with_its_reason_or_nothing():
    _, _, cells = matrix(SUMMARY, ATTEMPTS)
    initial, broken, best, wrong = cells
    # the initial kernel's holdout is read from its own holdout cases
    assert initial == [("pass", None), ("speedup", 1.0), ("speedup", 1.0), ("pass", None)]
    # it never ran: every shown case fails with its reason, and the holdout was not run
    assert broken == [("fail", "compile_error")] * 3 + [("none", None)]
    assert best == [("pass", None), ("speedup", pytest.approx(2.0)), ("pass", None), ("pass", None)]
    assert wrong == [("fail", "mismatch"), ("none", None), ("speedup", pytest.approx(0.5)), ("fail", "holdout")]


def test_a_timed_case_the_baseline_has_no_time_for_is_timed_not_a_speedup():
    extra = attempt("a0005", [case("odd", "correctness"), case("p3", "performance", median=10.0)])
    _, columns, cells = matrix(SUMMARY, ATTEMPTS[:1] + [extra])
    assert columns[3] == ("p3", "performance") and cells[1][3] == ("timed", None)
    # no baseline at all (a translation run before one passed): nothing is a speedup
    _, _, cells = matrix({"initial": None, "best": None}, ATTEMPTS[:1])
    assert cells[0][1:3] == [("timed", None), ("timed", None)]


def test_only_the_last_rows_are_kept_with_the_baseline_and_the_best_always():
    many = [attempt(f"a{i:04d}", [case("p1", "performance", median=100.0 + i)]) for i in range(MAX_ROWS + 10)]
    rows, _, cells = matrix({"initial": {"id": "a0000"}, "best": {"id": "a0003"}}, many)
    ids = [r["id"] for r in rows]
    assert ids[:2] == ["a0000", "a0003"] and ids[2] == "a0010" and ids[-1] == f"a{MAX_ROWS + 9:04d}"
    assert len(rows) == MAX_ROWS + 2 and cells[1][0] == ("speedup", pytest.approx(100.0 / 103.0))


def test_the_picture_is_written_into_the_run_only_when_an_attempt_was_gated(tmp_path):
    pytest.importorskip("matplotlib")
    run = RunDir(tmp_path)
    assert draw_heatmap(run, SUMMARY, ATTEMPTS[4:]) is False and not (tmp_path / "heatmap.png").exists()
    assert draw_heatmap(run, SUMMARY, ATTEMPTS) is True
    assert (tmp_path / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
