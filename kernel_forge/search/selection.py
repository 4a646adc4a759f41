"""Choosing the best: when a faster attempt may replace the current best kernel.

A single gated score is not enough to move the best: the fastest contenders of an iteration are
re-measured side by side with the best (:meth:`GateLike.retime`, interleaved rounds), and the best
is chosen **case by case** (:func:`compare`): a contender becomes the best when, on at least one
performance case, it is faster beyond the uncertainty of the two medians, and on no case slower
beyond it; then it must pass the hidden (holdout) cases with fresh values.  This one rule decides
for every proposer -- a model's kernel, a tuned setting, a fitted dispatch rule -- since they all
reach the best through :func:`maybe_move_best`.

The uncertainty of a case's median is :func:`~kernel_forge.common.stats.median_uncertainty` of
each side-by-side timing (the distribution-free 95 % interval of the median over the pooled
samples, widened to half the range of the per-round medians); a case's band is the sum of the
two (their intervals do not overlap beyond it), never less than ``min_improvement``.  Not the
spread of the samples: an 8 µs case's wide p20-p80 band no longer hides an 11 % gain on the case
that dominates the time (issue 30: dispatch rule a0108, refused at "noise 4.8 %").

What was decided is written on the attempts themselves (``retimed`` with each case's ratio and
band, ``holdout``, ``message``, ``status``), so the evidence says why each contender did or did not
become best.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernel_forge.model.candidate import Candidate
from kernel_forge.model.dispatch import holdout_variants
from kernel_forge.common.errors import KForgeError
from kernel_forge.gate.gatelike import GateLike
from kernel_forge.common.stats import median_uncertainty
from kernel_forge.model.verdict import Evaluation

if TYPE_CHECKING:
    from kernel_forge.records.attempt import Attempt

HIDDEN = "failed a hidden case (details withheld from proposers)"


@dataclass(frozen=True)
class Rules:
    rounds: int = 2                 #: interleaved re-measurement rounds
    min_improvement: float = 0.01   #: the least relative gain that can move the best (and the least band of a case)
    contenders: int = 2             #: how many of an iteration's fastest attempts are re-measured


def _gated_medians(a: "Attempt") -> dict[str, float]:
    ev = a.evaluation or {}
    return {c["name"]: float(c["timing"]["median"]) for c in ev.get("cases", [])
            if c.get("role") == "performance" and c.get("timing") and c["timing"].get("median", 0) > 0}


def contenders(batch: list["Attempt"], best: "Attempt", limit: int, min_improvement: float = 0.01) -> list["Attempt"]:
    """The passed attempts of ``batch`` faster than ``best`` by their gated score, or by more than
    ``min_improvement`` on one performance case's gated median (a gain on one case can move the
    best), fastest score first."""
    mine = _gated_medians(best)

    def faster(a: "Attempt") -> bool:
        if a.score_us < best.score_us:
            return True
        theirs = _gated_medians(a)
        return any(n in theirs and theirs[n] < m * (1 - min_improvement) for n, m in mine.items())

    pool = [a for a in batch if a.status == "passed" and a.score_us and not a.best and best.score_us and faster(a)]
    return sorted(pool, key=lambda a: a.score_us)[:limit]


@dataclass
class Comparison:
    """A contender against the best, case by case, from one side-by-side measurement."""

    cases: dict[str, dict] = field(default_factory=dict)   # name -> ratio, band, candidate_us, best_us
    faster: list[str] = field(default_factory=list)        # cases faster beyond their band
    slower: list[str] = field(default_factory=list)        # cases slower beyond their band

    @property
    def moves(self) -> bool:
        return bool(self.faster) and not self.slower

    def describe(self) -> str:
        return ", ".join(f"{n} x{c['ratio']:.3f} ±{c['band']:.1%}" for n, c in self.cases.items())


def compare(best_ev: Evaluation, new_ev: Evaluation, min_improvement: float) -> Comparison:
    """Per performance case: the ratio of the medians (contender / best) and the band it must
    leave -- the sum of the two medians' relative uncertainties
    (:func:`~kernel_forge.common.stats.median_uncertainty`), never less than ``min_improvement``.
    A case is faster when its ratio is below ``1 - band``, slower when above ``1 + band``."""
    out = Comparison()
    for case in best_ev.cases:
        mine, other = case.timing, new_ev.case(case.name)
        theirs = other.timing if other is not None else None
        if mine is None or theirs is None or mine.median <= 0:
            continue
        band = max(median_uncertainty(mine) + median_uncertainty(theirs), min_improvement)
        ratio = theirs.median / mine.median
        out.cases[case.name] = {"ratio": ratio, "band": band, "candidate_us": theirs.median, "best_us": mine.median}
        if ratio < 1 - band:
            out.faster.append(case.name)
        elif ratio > 1 + band:
            out.slower.append(case.name)
    return out


def maybe_move_best(gate: GateLike, best: "Attempt", batch: list["Attempt"], rules: Rules, *,
                    candidate: Callable[["Attempt"], Candidate],
                    save: Callable[[], None] = lambda: None) -> "Attempt | None":
    """The attempt of ``batch`` that becomes the new best (marked ``best``), or None.

    ``candidate`` gives an attempt's kernel; ``save`` persists the records after each rejected
    contender (the loop writes history.json), so a kill loses no decision."""
    for c in contenders(batch, best, rules.contenders, rules.min_improvement):
        best_ev, new_ev = gate.retime([candidate(best), candidate(c)], rounds=rules.rounds)
        if not (best_ev.passed and new_ev.passed):
            bad = new_ev if not new_ev.passed else best_ev
            c.message = f"re-measurement failed: {bad.reason}: {bad.message}"
            if not new_ev.passed:
                c.status, c.reason = "failed", new_ev.reason
            save()
            continue
        cmp = compare(best_ev, new_ev, rules.min_improvement)
        c.retimed = {"candidate_us": new_ev.score_us, "best_us": best_ev.score_us, "best_id": best.id,
                     "noise": max([v["band"] for v in cmp.cases.values()] + [rules.min_improvement]),
                     "rule": "case by case", "faster": cmp.faster, "slower": cmp.slower,
                     "cases": {n: {k: round(v, 6) for k, v in row.items()} for n, row in cmp.cases.items()}}
        if not cmp.moves:
            why = (f"slower beyond noise on {', '.join(cmp.slower)}" if cmp.slower
                   else "not faster beyond noise")
            c.message = (f"{why}: {new_ev.score_us:.2f} vs {best_ev.score_us:.2f} µs side by side "
                         f"(per case, contender/best ± the medians' uncertainty: {cmp.describe()})")
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
