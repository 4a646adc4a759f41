"""kernel_forge/model/verdict.py: the gate's verdict as data: reason codes, per-case results, their JSON."""
from __future__ import annotations

import json

from kernel_forge.common.stats import summarize
from kernel_forge.model.verdict import NOT_THE_KERNELS_FAULT, REASONS, CaseResult, Evaluation


def _case(name, passed=True, reason="passed", **kw) -> CaseResult:
    return CaseResult(name=name, role="correctness", passed=passed, reason=reason, **kw)


def test_every_reason_has_its_meaning_and_the_harness_s_own_faults_are_reasons_too():
    assert NOT_THE_KERNELS_FAULT == {"harness_error", "reference_error"} and NOT_THE_KERNELS_FAULT <= set(REASONS)
    assert REASONS["passed"] == "all checks passed" and all(isinstance(v, str) and v for v in REASONS.values())


def test_a_case_result_round_trips_through_json_with_its_timing_and_without_its_samples():
    c = _case("large", timing=summarize([3.0, 1.0, 2.0]), launch={"grid": [8, 1, 1]}, resources={"registers": 32},
              variant={"branch": 1, "when": "default", "defines": {"B": 128}})
    d = json.loads(json.dumps(c.to_json()))
    assert d["timing"]["median"] == 2.0 and d["timing"]["samples_us"] == [3.0, 1.0, 2.0] and d["variant"]["branch"] == 1
    back = CaseResult.from_json(d)
    assert back == c and back.median_us == 2.0
    lean = c.to_json(with_samples=False)
    assert "samples_us" not in lean["timing"] and CaseResult.from_json(lean).median_us == 2.0
    plain = _case("odd").to_json()
    assert "variant" not in plain and plain["timing"] is None and _case("odd").median_us is None


def test_an_evaluation_round_trips_with_its_cases_and_leaves_out_a_dispatch_it_does_not_have():
    ev = Evaluation(label="k.cu", passed=False, reason="mismatch", cases=[_case("odd"), _case("tiny", False, "mismatch")],
                    seconds=1.23456, defines={"B": 128}, dispatch=[{"when": None, "defines": {"B": 128}}])
    d = json.loads(json.dumps(ev.to_json()))
    assert d["seconds"] == 1.235 and d["dispatch"] == [{"when": None, "defines": {"B": 128}}]
    back = Evaluation.from_json({**d, "from_a_later_version": True})         # unknown keys are ignored
    assert [c.name for c in back.cases] == ["odd", "tiny"] and isinstance(back.cases[1], CaseResult)
    assert (back.reason, back.defines, back.seconds) == ("mismatch", {"B": 128}, 1.235)
    assert "dispatch" not in Evaluation(label="k.cu", passed=True).to_json()


def test_failures_leave_out_skipped_cases_and_a_case_is_found_by_name():
    ev = Evaluation(label="k.cu", passed=False, reason="crash",
                    cases=[_case("odd"), _case("tiny", False, "crash"), _case("large", False, "skipped")])
    assert [c.name for c in ev.failures()] == ["tiny"]
    assert ev.case("large").reason == "skipped" and ev.case("holdout") is None
