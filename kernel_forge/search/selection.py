"""Choosing the best: when a faster attempt may replace the current best kernel.

A single gated score is not enough to move the best: the fastest contenders of an iteration are
re-measured side by side with the best (:meth:`GateLike.retime`, interleaved rounds), the gain
must exceed the noise band of both measurements (and at least ``min_improvement``), and the
contender must pass the hidden (holdout) cases with fresh values.  What was decided is written on
the attempts themselves (``retimed``, ``holdout``, ``message``, ``status``), so the evidence says
why each contender did or did not become best.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel_forge.model.candidate import Candidate
from kernel_forge.model.dispatch import holdout_variants
from kernel_forge.common.errors import KForgeError
from kernel_forge.gate.gatelike import GateLike
from kernel_forge.common.stats import noise_band
from kernel_forge.model.verdict import Evaluation

if TYPE_CHECKING:
    from kernel_forge.search.attempt import Attempt

HIDDEN = "failed a hidden case (details withheld from proposers)"


@dataclass(frozen=True)
class Rules:
    rounds: int = 2                 #: interleaved re-measurement rounds
    min_improvement: float = 0.01   #: the least relative gain that can move the best
    contenders: int = 2             #: how many of an iteration's fastest attempts are re-measured


def contenders(batch: list["Attempt"], best: "Attempt", limit: int) -> list["Attempt"]:
    """The passed attempts of ``batch`` faster than ``best`` by their gated score, fastest first."""
    faster = [a for a in batch if a.status == "passed" and a.score_us and not a.best
              and best.score_us and a.score_us < best.score_us]
    return sorted(faster, key=lambda a: a.score_us)[:limit]


def noise(best_ev: Evaluation, new_ev: Evaluation, min_improvement: float) -> float:
    """The relative band a gain must exceed: the widest p20-p80 half-band of either measurement,
    and never less than ``min_improvement``."""
    bands = [noise_band(c.timing) for ev in (best_ev, new_ev) for c in ev.cases if c.timing is not None]
    return max(bands + [min_improvement])


def maybe_move_best(gate: GateLike, best: "Attempt", batch: list["Attempt"], rules: Rules, *,
                    candidate: Callable[["Attempt"], Candidate],
                    save: Callable[[], None] = lambda: None) -> "Attempt | None":
    """The attempt of ``batch`` that becomes the new best (marked ``best``), or None.

    ``candidate`` gives an attempt's kernel; ``save`` persists the records after each rejected
    contender (the loop writes history.json), so a kill loses no decision."""
    for c in contenders(batch, best, rules.contenders):
        best_ev, new_ev = gate.retime([candidate(best), candidate(c)], rounds=rules.rounds)
        if not (best_ev.passed and new_ev.passed):
            bad = new_ev if not new_ev.passed else best_ev
            c.message = f"re-measurement failed: {bad.reason}: {bad.message}"
            if not new_ev.passed:
                c.status, c.reason = "failed", new_ev.reason
            save()
            continue
        band = noise(best_ev, new_ev, rules.min_improvement)
        c.retimed = {"candidate_us": new_ev.score_us, "best_us": best_ev.score_us, "best_id": best.id,
                     "noise": band}
        if new_ev.score_us >= best_ev.score_us * (1 - band):
            c.message = (f"not faster beyond noise: {new_ev.score_us:.2f} vs {best_ev.score_us:.2f} µs "
                         f"side by side (noise {band:.1%})")
            save()
            continue
        hold = gate.evaluate(candidate(c), roles=("holdout",))
        c.holdout = {"passed": hold.passed, "reason": hold.reason, "message": hold.message, "final": False,
                     **holdout_variants(hold)}      # under a dispatch rule: the line each hidden case ran with
        if not hold.passed:
            c.status, c.reason, c.message = "failed", "holdout_failed", HIDDEN
            save()
            continue
        c.best = True
        return c
    return None


def final_holdout(gate: GateLike, best: "Attempt", candidate: Callable[["Attempt"], Candidate]) -> None:
    """The run's last check: the best on the hidden cases with fresh values (``final`` true)."""
    try:
        hold = gate.evaluate(candidate(best), roles=("holdout",))
        best.holdout = {"passed": hold.passed, "reason": hold.reason, "message": hold.message, "final": True,
                        **holdout_variants(hold)}
    except KForgeError as exc:
        best.holdout = {"passed": False, "reason": "error", "message": str(exc), "final": True}
