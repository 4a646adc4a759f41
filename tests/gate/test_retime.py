"""Tests of kernel_forge/gate/retime.py: the rounds of a side-by-side re-timing pooled case by case."""
from __future__ import annotations

import pytest

from kernel_forge.common.stats import summarize
from kernel_forge.gate.retime import pooled_evaluation, pooled_timing
from kernel_forge.model.verdict import CaseResult, Evaluation


def round_of(samples: dict[str, list[float]], *, passed: bool = True, reason: str = "passed") -> Evaluation:
    cases = [CaseResult(name=n, role="performance", passed=passed, timing=summarize(s)) for n, s in samples.items()]
    return Evaluation(label="k.cu", passed=passed, reason=reason, cases=cases,
                      score_us=None if not passed else 1.0)


def test_each_case_pools_the_samples_of_every_round_and_keeps_each_round_s_median():
    evs = [round_of({"big": [10, 11, 12], "small": [4, 4, 4]}),
           round_of({"big": [20, 21, 22], "small": [4, 4, 4]})]
    filled = []
    ev = pooled_evaluation(evs, filled.append)
    assert ev is evs[0]
    big = ev.case("big").timing
    assert sorted(big.samples_us) == [10, 11, 12, 20, 21, 22]
    assert big.median == 16.0                        # between the two rounds' samples 12 and 20
    assert big.round_medians == (11.0, 21.0)
    assert ev.case("small").timing.round_medians == (4.0, 4.0)
    assert [c.name for c in filled] == ["big", "small"]      # the rates are taken again from the pooled timing
    assert ev.score_us == pytest.approx(8.0)                  # geomean(16, 4)


def test_any_failing_round_is_the_answer_and_nothing_is_pooled():
    ok = round_of({"big": [10, 11, 12]})
    bad = round_of({"big": [30, 31, 32]}, passed=False, reason="stale_after_timing")
    worse = round_of({"big": [40]}, passed=False, reason="mismatch")
    assert pooled_evaluation([ok, bad, worse], lambda c: pytest.fail("no rates for a failed re-timing")) is bad
    assert ok.case("big").timing.samples_us == (10.0, 11.0, 12.0)


def test_the_event_estimates_are_pooled_when_every_round_has_their_samples():
    first = summarize([5.0, 5.0], method="cupti", clock_offset_us=0.86, flushed=False,
                      events={"median": 7.0, "samples_us": [7.0, 7.0]})
    second = summarize([6.0, 6.0], method="cupti", clock_offset_us=0.86,
                       events={"median": 9.0, "samples_us": [9.0, 9.0]})
    t = pooled_timing(first, [first, second], [5.0, 5.0, 6.0, 6.0])
    assert t.median == 5.5 and t.round_medians == (5.0, 6.0)
    assert (t.method, t.clock_offset_us, t.flushed) == ("cupti", 0.86, False)    # the first round's
    assert t.events["median"] == 8.0 and t.events["samples_us"] == [7.0, 7.0, 9.0, 9.0]


def test_a_round_without_event_samples_leaves_the_first_round_s_estimate():
    first = summarize([5.0], method="cupti", events={"median": 7.0, "samples_us": [7.0]})
    second = summarize([6.0], method="cupti", events=None)
    t = pooled_timing(first, [first, second], [5.0, 6.0])
    assert t.events == {"median": 7.0, "samples_us": [7.0]}
    plain = summarize([5.0])
    assert pooled_timing(plain, [plain, summarize([6.0])], [5.0, 6.0]).events is None
