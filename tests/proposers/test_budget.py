"""kernel_forge.proposers.budget: the worst-case estimate of a call and the shared --budget-usd reservations."""
from __future__ import annotations

import threading

import pytest

from kernel_forge.proposers.budget import Budget, BudgetRefused, estimate_tokens


def test_a_body_s_tokens_are_estimated_as_a_third_of_its_json_characters_rounded_up():
    assert estimate_tokens("abcdefghi") == 4                   # 9 characters: 3, plus one
    assert estimate_tokens("abcdefgh") == 3                    # 8 / 3 = 2.67: 2, plus one
    assert estimate_tokens({"a": "b"}) == 4                    # '{"a": "b"}' is 10 characters
    # non-ASCII text is counted as the characters it is, not as \u escapes (6 characters each)
    assert estimate_tokens({"t": "é" * 30}) == estimate_tokens({"t": "e" * 30}) == int(39 / 3) + 1


def test_a_reservation_holds_its_worst_case_until_the_call_settles_at_its_real_cost():
    budget = Budget(1.0, spent_usd=0.25)                       # a resumed run spent a quarter before
    assert budget.left == pytest.approx(0.75)
    held = budget.reserve(0.5, "call 1")
    assert (held.usd, held.what) == (0.5, "call 1")
    assert budget.reserved == pytest.approx(0.5) and budget.left == pytest.approx(0.25)
    budget.settle(held, 0.125)
    assert budget.reserved == 0.0 and budget.spent == pytest.approx(0.375) and budget.left == pytest.approx(0.625)


def test_a_call_whose_worst_case_exceeds_what_is_left_is_refused_with_the_figures():
    budget = Budget(1.0, spent_usd=0.25)
    budget.reserve(0.5, "call 1")
    budget.reserve(0.25, "call 2")                             # exactly what is left still fits
    with pytest.raises(BudgetRefused) as info:
        budget.reserve(0.01, "one request to openai:gpt-5")
    assert str(info.value) == ("budget: one request to openai:gpt-5 could cost up to $0.0100, and $0.0000 of "
                               "--budget-usd 1 is left ($0.2500 spent, $0.7500 held by calls in flight); the call "
                               "was not made")
    assert budget.reserved == pytest.approx(0.75)              # the refused call holds nothing


def test_settling_without_a_reservation_adds_the_cost_and_a_negative_cost_adds_nothing():
    budget = Budget(2.0)
    budget.settle(None, 0.5)
    budget.settle(budget.reserve(0.25, "x"), -1.0)
    assert budget.spent == pytest.approx(0.5) and budget.reserved == 0.0 and budget.left == pytest.approx(1.5)


def test_calls_reserving_at_once_never_hold_more_than_the_budget():
    budget, made, refused = Budget(1.0), [], []
    start = threading.Barrier(10)

    def call():
        start.wait()
        try:
            made.append(budget.reserve(0.3, "call"))
        except BudgetRefused:
            refused.append(1)

    threads = [threading.Thread(target=call) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(made), len(refused)) == (3, 7) and budget.reserved == pytest.approx(0.9)
