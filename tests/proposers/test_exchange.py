"""kernel_forge.proposers.exchange: one request on the wire, held to the budget and recorded."""
from __future__ import annotations

import pytest

from kernel_forge.proposers.budget import Budget
from kernel_forge.proposers.exchange import exchange
from kernel_forge.proposers.pricing import PriceTable
from kernel_forge.proposers.retry import MidStreamError, RetryPolicy, classify_exception
from kernel_forge.proposers.usage import Usage, price_of


class Wire:
    """The hooks and settings of a model proposer that :func:`exchange` uses: an answer that drops
    mid-stream once (after 300 characters of it arrived), then comes whole."""

    provider, model, name, timeout, _secrets = "openai", "m", "openai:m", 5.0, ("sk-secret",)
    caps = type("Caps", (), {"key": "openai:m"})

    def __init__(self):
        self.prices = PriceTable({"openai:m": {"input": 1.0, "output": 10.0}})
        self.budget = Budget(1.0)
        self.retry = RetryPolicy(max_attempts=3, sleep=lambda s: None)
        self.sent = 0

    def _send(self, body, on_start, progress):
        self.sent += 1
        progress.started = True
        if self.sent == 1:
            progress.chars = 300
            raise MidStreamError("dropped", transient=True, dropped=True)
        return {"answer": "ok"}

    def _usage(self, response):
        return Usage(input=1000, output=100)

    def _classify(self, exc):
        return classify_exception(exc)

    def _price(self, usage):
        return price_of(self.prices, self.provider, self.model, usage)

    def _worst_case(self, body):
        return 0.05, 1000, 100

    def _plan_json(self, plan, body):
        return {}


def test_an_attempt_billed_before_it_dropped_is_paid_for_and_the_budget_settles_at_the_call_s_cost():
    p = Wire()
    reservation = p.budget.reserve(0.05, "the call")
    call, response, failure = exchange(p, {"input": "sk-secret " + "x" * 297}, lambda: None, reservation)
    assert response == {"answer": "ok"} and failure is None and call.attempts == 2
    assert call.billed_failed_attempts == 1 and call.usage_estimated is True
    assert call.output_tokens == 100 + 100 and call.cost_usd == pytest.approx(p.budget.spent)
    assert p.budget.reserved == 0 and "sk-secret" not in str(call.request)
