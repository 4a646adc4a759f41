"""``--budget-usd`` checked before every model call, against that call's worst case.

A call's worst case is its input (estimated from the body: every character of its text counted
as a third of a token, which over-counts) billed at the dearest input rate the model has, plus
the whole output limit billed at the output rate.  A :class:`Budget` is shared by the proposers
of a run (the parallel requests of an iteration, and an ensemble's members): a call first
*reserves* its worst case, so calls in flight together can never overshoot; when it returns, its
real cost replaces the reservation.  A call whose worst case does not fit what is left is not
made: :class:`BudgetRefused` says why, with the figures.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass

#: characters per token when estimating a body's input tokens (low, so the estimate is high)
CHARS_PER_TOKEN = 3.0


class BudgetRefused(Exception):
    """A call that would not fit the budget (``str()`` gives the figures)."""


def estimate_tokens(body: object) -> int:
    """An over-estimate of the input tokens of a request body (its JSON text / 3)."""
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return int(len(text) / CHARS_PER_TOKEN) + 1


@dataclass
class Reservation:
    usd: float
    what: str


class Budget:
    """What is left of ``limit_usd`` after ``spent_usd`` (an earlier part of a resumed run)."""

    def __init__(self, limit_usd: float, spent_usd: float = 0.0):
        self.limit = float(limit_usd)
        self.spent = float(spent_usd)
        self.reserved = 0.0
        self._lock = threading.Lock()

    @property
    def left(self) -> float:
        with self._lock:
            return self.limit - self.spent - self.reserved

    def reserve(self, worst_usd: float, what: str) -> Reservation:
        """Hold ``worst_usd`` for a call described by ``what``, or raise :class:`BudgetRefused`."""
        with self._lock:
            left = self.limit - self.spent - self.reserved
            if worst_usd > left:
                raise BudgetRefused(
                    f"budget: {what} could cost up to ${worst_usd:.4f}, and ${max(0.0, left):.4f} of "
                    f"--budget-usd {self.limit:g} is left (${self.spent:.4f} spent, ${self.reserved:.4f} held by "
                    "calls in flight); the call was not made")
            self.reserved += worst_usd
            return Reservation(worst_usd, what)

    def settle(self, reservation: Reservation | None, actual_usd: float) -> None:
        """The call of ``reservation`` is over and cost ``actual_usd``."""
        with self._lock:
            if reservation is not None:
                self.reserved = max(0.0, self.reserved - reservation.usd)
            self.spent += max(0.0, actual_usd)
