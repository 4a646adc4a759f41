"""One model request on the wire (:func:`exchange`): sent with the retry policy, held to the
budget (a reservation at its worst case before, settled at its cost after, failed attempts that
were billed included), and recorded as one :class:`~.base.ModelCall` with the body sent, the body
received, the token counts, cost, seconds, attempts and how the request was built."""
from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from kernel_forge.common.scrub import scrub
from kernel_forge.proposers.base import ModelCall
from kernel_forge.proposers.budget import BudgetRefused
from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.retry import TIMEOUT, Failure, call_with_retry
from kernel_forge.proposers.transport import dump_response
from kernel_forge.proposers.usage import Progress, Usage, billed_before_failure, with_billed


def exchange(p, body: dict, on_start: Callable[[], None], reservation=None,
             plan: CachePlan | None = None) -> tuple[ModelCall, Any, Failure | None]:
    """Send ``body`` through model proposer ``p`` (its ``_send``, ``_usage`` and ``_classify`` hooks,
    its retry policy, budget and prices): (the call's record, the answer or None, the failure or
    None).  ``reservation``: the budget already reserved for it; ``plan``: how the request was built."""
    sent = copy.deepcopy(body)
    start = time.monotonic()
    billed: list[Usage] = []         # what attempts that failed after their answer began were billed
    held = {"reservation": reservation, "settled": 0.0, "first": reservation}

    def attempt():
        if billed and held["reservation"] is not None:
            # a retry after a billed failure: what was billed is spent, and the retry must fit what
            # is left at its own worst case (a budget bounds retries too)
            cost = sum(p._price(u) for u in billed) - held["settled"]
            p.budget.settle(held["reservation"], cost)
            held["settled"] += cost
            held["reservation"] = None
            held["reservation"] = p.budget.reserve(p._worst_case(body)[0],
                                                   f"a retry after a failure mid-answer ({p.name})")
        progress = Progress()
        try:
            return p._send(body, on_start, progress)
        except Exception:
            got = billed_before_failure(progress, body)
            if got is not None:
                billed.append(got)
            raise

    def classify(exc: BaseException) -> Failure | None:
        if isinstance(exc, BudgetRefused):
            return Failure(retryable=False, description=str(exc), kind="budget")
        return p._classify(exc)

    try:
        outcome = call_with_retry(attempt, p.retry, classify=classify)
    except BaseException:
        if p.budget is not None and held["reservation"] is not None:
            p.budget.settle(held["reservation"], sum(p._price(u) for u in billed) - held["settled"])
        raise
    seconds = time.monotonic() - start
    response_obj = outcome.value if outcome.ok else None
    failure = outcome.failure
    if outcome.ok:
        received = dump_response(response_obj)
        usage = p._usage(response_obj)
        error = None
    else:
        received = failure.body if failure is not None and isinstance(failure.body, dict) else None
        usage = Usage()
        error = failure.description if failure is not None else repr(outcome.error)
        if failure is not None and failure.kind == TIMEOUT:
            error = f"{error} (timed out {outcome.timeouts} time(s) at {p.timeout:g} s)"
    usd = p._price(usage) + sum(p._price(u) for u in billed)
    usage = with_billed(usage, billed)     # the tokens of failed attempts count with the answer's
    if p.budget is not None and (held["reservation"] is not None or usd - held["settled"]):
        p.budget.settle(held["reservation"], usd - held["settled"])
    plan_json = p._plan_json(plan, body) if plan is not None else None
    if plan_json is not None and reservation is not None:
        plan_json["budget_reserved_usd"] = round(reservation.usd, 6)
    call = ModelCall(provider=p.provider, model=p.model, request=sent, response=received,
                     input_tokens=usage.total_input, output_tokens=usage.output, cost_usd=usd,
                     seconds=round(seconds, 6), error=error,
                     attempts=max(1, outcome.attempts - (failure is not None and failure.kind == "budget")),
                     reasoning_tokens=usage.reasoning, cache_read_tokens=usage.cache_read,
                     cache_write_tokens=usage.cache_write + usage.cache_write_long,
                     cache_write_long_tokens=usage.cache_write_long, timeouts=outcome.timeouts,
                     reasoning_reported=usage.reasoning_reported, capability=p.caps.key, plan=plan_json,
                     usage_estimated=usage.estimated, billed_failed_attempts=len(billed))
    return scrub(call, p._secrets), response_obj, failure
