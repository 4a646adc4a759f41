"""What the records say about lines of kernels (search/lineage.py): an attempt's technique, the
kernel it is measured against, the cases one kernel wins over another, and what each technique did."""
from __future__ import annotations

from kernel_forge.records.attempt import Attempt
from kernel_forge.search.lineage import comparable_parent, outcomes, ratio_to_parent, technique_of, wins_over


def att(i: int, score: float | None, *, parent: str | None = "a0000", status: str = "passed", technique: str = "",
        proposer: str = "model", fix_of: str | None = None, cases: dict | None = None) -> Attempt:
    times = cases or ({"x": score} if score else {})
    ev = {"cases": [{"name": n, "role": "performance", "timing": {"median": t}} for n, t in times.items()]}
    return Attempt(id=f"a{i:04d}", iteration=1, proposer=proposer, label=f"l{i}", parent=parent, status=status,
                   score_us=score, technique=technique, fix_of=fix_of, evaluation=ev if times else None)


def test_a_fix_takes_the_technique_of_what_it_repairs_and_untagged_kernels_say_where_they_came_from():
    first = att(1, None, status="failed", technique="mem:coalesce")
    fix = att(2, 90.0, parent="a0001", fix_of="a0001")
    assert technique_of(fix, {"a0001": first, "a0002": fix}) == "mem:coalesce"
    assert technique_of(att(3, 1.0, proposer="tune")) == "tune:l3"
    assert technique_of(att(0, 1.0, proposer="initial", parent=None)) == "initial"
    assert technique_of(att(4, 1.0)) == "untagged"


def test_a_kernel_is_measured_against_its_nearest_ancestor_that_passed():
    base, broken = att(0, 100.0, parent=None), att(1, None, status="failed")
    fix = att(2, 80.0, parent="a0001")
    by_id = {a.id: a for a in (base, broken, fix)}
    assert comparable_parent(fix, by_id) is base
    assert ratio_to_parent(fix, base) == 100.0 / 80.0 and ratio_to_parent(broken, base) is None


def test_a_kernel_wins_the_cases_it_is_faster_on_beyond_the_noise():
    a = att(1, 0, cases={"x": 100.0, "y": 200.0, "z": 99.5})
    b = att(2, 0, cases={"x": 150.0, "y": 150.0, "z": 100.0})
    assert wins_over(a, b) == ["x"] and wins_over(b, a) == ["y"]


def test_each_technique_is_told_by_what_its_attempts_did_against_their_parents():
    xs = [att(0, 100.0, parent=None), att(1, 80.0, technique="a#2"), att(2, 120.0, technique="b"),
          att(3, 100.5, technique="b"), att(4, None, status="failed", technique="c")]
    assert outcomes(xs, 0.01) == {"a": [("a0001", "gain")], "b": [("a0002", "slower"), ("a0003", "noise")],
                                  "c": [("a0004", "failed")]}
