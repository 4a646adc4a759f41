"""One proposal's conversation with a model (:class:`Conversation`): its first request, then at
most one of each follow-up -- a relaxed request after an HTTP 400 naming an optional parameter,
a truncation retry (twice the limit up to the cap, or a shorter answer at the cap), a repair turn
for an unusable answer -- every call checked against the budget first and recorded."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kernel_forge.common.scrub import scrub
from kernel_forge.proposers.base import ModelCall, Proposal, ProposalRequest
from kernel_forge.proposers.budget import BudgetRefused
from kernel_forge.proposers.cache_plan import CachePlan
from kernel_forge.proposers.context import ContextRefused
from kernel_forge.proposers.exchange import exchange
from kernel_forge.proposers.relaxation import relaxation_for
from kernel_forge.proposers.retry import CONNECT
from kernel_forge.proposers.proposal_schema import ProposalSchemaError, to_proposal
from kernel_forge.proposers.transport import as_count


class Conversation:
    """What one conversation of model proposer ``p`` produced: its proposal or why there is none,
    every call it took, whether each failed to connect, whether the budget refused one."""

    def __init__(self, p, where: str, plan: CachePlan, on_start: Callable[[], None] = lambda: None):
        self.p, self.where, self.plan, self.on_start = p, where, plan, on_start
        self.proposal: Proposal | None = None
        self.calls: list[ModelCall] = []
        self.error: str | None = None
        self.connect_failed: list[bool] = []     # per call: no connection was made
        self.budget = False                       # a call was refused by the budget
        self.used: set[str] = set()               # follow-ups already spent: repair, truncation, relaxations

    def propose(self, request: ProposalRequest, index: int) -> None:
        """Proposal ``index`` of ``request``: asked, its answer read, repaired once if unusable."""
        p = self.p
        try:
            try:
                body = p._fit_prompt(request, index, self.plan, self.where)
            except ContextRefused as exc:
                self.error = scrub(str(exc), p._secrets)
                return
            parent = request.parent_for(index)
            while True:
                got = self.answer(body)
                if got is None:
                    return
                response, body = got
                reading = p._read(response, parent)
                if reading.problem is None and reading.args is not None:
                    try:
                        proposal = to_proposal(reading.args, proposer=p.name,
                                               rationale_prefix=reading.rationale_prefix)
                    except ProposalSchemaError as exc:   # _read should have caught it; be safe
                        reading.problem = str(exc)
                    else:
                        if index < len(request.slots):
                            proposal.direction = request.slots[index].direction
                        self.proposal = proposal
                        return
                problem = reading.problem or "no usable answer"
                self.calls[-1].error = scrub(f"invalid answer: {problem}", p._secrets)
                if "repair" in self.used:
                    self.error = scrub(f"{self.where}: answer still invalid after one repair request: {problem}",
                                       p._secrets)
                    return
                self.used.add("repair")
                body = p._repair_body(body, response, problem)
        finally:
            self.on_start()      # the others go ahead even when the first fails

    def answer(self, body: dict, shorter: bool = True) -> tuple[Any, dict] | None:
        """Send ``body`` until an answer comes that was not cut off: the budget checked before every
        call against its worst case, a relaxed request after an HTTP 400 naming an optional parameter,
        one truncation follow-up per conversation (at the cap a shorter answer is asked for where
        ``shorter``).  Returns the answer and the body that got it, or None with ``error`` (and
        ``budget``) set; every call goes to ``calls``."""
        p = self.p
        while True:
            try:
                body, fitted = p._fit_output(body, self.where)
            except ContextRefused as exc:
                self.error = scrub(str(exc), p._secrets)
                return None
            try:
                reservation = p._reserve(body, self.where)
            except BudgetRefused as exc:
                self.error, self.budget = f"{self.where}: {exc}", True
                return None
            call, response, failure = exchange(p, body, self.on_start, reservation, self.plan)
            if call.plan is not None and (fitted or p._cut_note):
                call.plan["context"] = {**(p._cut_note or {}), **(fitted or {})}
            self.calls.append(call)
            self.connect_failed.append(response is None and failure is not None and failure.kind == CONNECT)
            if response is not None:
                refused = p._refusal(response)
                if refused is not None:      # not a bad answer: a repair or a retry would be paid for the same
                    call.error = scrub(f"not answered: {refused}; recorded as a failed call (no repair asked)",
                                       p._secrets)
                    self.error = scrub(f"{self.where}: {call.error}", p._secrets)
                    return None
            if response is None:
                relax = relaxation_for(p._relaxations(), failure, body, self.used)
                if relax is not None:
                    self.used.add(relax.name)
                    message = failure.message if failure is not None else ""
                    new_body = relax.adapt(body, message) if relax.adapt is not None else relax.apply(body)
                    if relax.learn:
                        p.learned.learn(relax, body, new_body)
                    call.error = scrub(f"{call.error} -- {relax.note}, for this model for the rest of the run",
                                       p._secrets)
                    body = new_body
                    continue
                self.error = f"{self.where}: request failed after {call.attempts} attempt(s): {call.error}"
                self.budget = self.budget or (failure is not None and failure.kind == "budget")
                return None
            if not p._truncated(response):
                return response, body
            key = p._limit_field(body)
            limit = as_count(body.get(key)) or p.max_tokens
            at_cap = limit >= p.max_tokens_cap or p._output_room(body) <= limit
            if "truncation" in self.used or (at_cap and not shorter):
                again = "again" if "truncation" in self.used else "the cap"
                call.error = f"truncated: the answer was cut off at the output limit ({limit} tokens) {again}"
                self.error = scrub(f"{self.where}: {call.error.removeprefix('truncated: ')}", p._secrets)
                return None
            self.used.add("truncation")
            room = p._output_room(body)
            at_cap = at_cap or room <= limit
            if not at_cap:
                new_limit = min(p.max_tokens_cap, 2 * limit, room)
                call.error = (f"truncated: the answer was cut off at the output limit ({limit} tokens); "
                              f"asked again with {key}={new_limit}")
                body = copy.deepcopy(body)
                body[key] = new_limit
            else:
                call.error = (f"truncated: the answer was cut off at the output limit ({limit} tokens, the "
                              "cap); asked again for a shorter answer")
                body = p._add_user_text(body, p.shorter_text(limit))

