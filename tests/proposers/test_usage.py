"""kernel_forge.proposers.usage: token counts, what a failed attempt was billed, their price."""
from __future__ import annotations

import pytest

from kernel_forge.proposers.pricing import PriceTable
from kernel_forge.proposers.usage import Progress, Usage, billed_before_failure, price_of, with_billed


def test_an_attempt_that_failed_before_its_answer_began_bills_nothing_after_it_its_input_and_what_arrived():
    assert billed_before_failure(Progress(started=False, chars=900), {"x": "y"}) is None
    got = billed_before_failure(Progress(started=True, chars=10), {"prompt": "p" * 300})
    assert got.estimated and got.output == 4 and got.input > 90 and got.reasoning_reported is False
    reported = Usage(input=500, output=20)
    assert billed_before_failure(Progress(started=True, usage=reported, chars=30), {}) is reported


def test_failed_attempts_add_their_tokens_and_an_estimated_usage_is_priced_at_the_worst_case():
    total = with_billed(Usage(input=100, output=10, cache_read=5), [Usage(input=50, output=4, estimated=True)])
    assert (total.input, total.output, total.cache_read, total.estimated) == (150, 14, 5, True)
    table = PriceTable({"openai:m": {"input": 1.0, "cached_input": 0.5, "output": 2.0}})
    assert price_of(table, "openai", "m", Usage(input=10**6, output=10**6)) == pytest.approx(3.0)
    estimated = Usage(input=10**6, output=0, estimated=True)
    assert price_of(table, "openai", "m", estimated) == table.worst_case("openai", "m", 10**6, 0).usd
