"""Side-by-side re-timing: the rounds of one candidate's evaluations pooled into one, case by case
(all samples, the pooled event estimate and each round's median)."""
from __future__ import annotations

from collections.abc import Callable

from kernel_forge.common.stats import geomean, summarize
from kernel_forge.model.verdict import CaseResult, Evaluation

__all__ = ["pooled_evaluation", "pooled_timing"]


def pooled_evaluation(evs: list[Evaluation], throughput: Callable[[CaseResult], None]) -> Evaluation:
    """The first round's evaluation with every case's samples pooled over the rounds and the score
    taken again (``throughput`` fills a case's rates from its pooled timing); the first failing
    round's evaluation where any round failed."""
    first = evs[0]
    if not all(e.passed for e in evs):
        return next(e for e in evs if not e.passed)
    for case in first.cases:
        samples = [s for e in evs for s in e.case(case.name).timing.samples_us]
        case.timing = pooled_timing(case.timing, [e.case(case.name).timing for e in evs], samples)
        throughput(case)
    first.score_us = geomean([c.timing.median for c in first.cases])
    return first


def pooled_timing(first, timings, samples):
    """One Timing of pooled samples, keeping the method, the pooled event estimate and each
    round's median (``round_medians``: what :func:`~kernel_forge.common.stats.median_uncertainty`
    reads, with the pooled samples, as the uncertainty of the median)."""
    events = None
    if first.events is not None and all(t.events and t.events.get("samples_us") for t in timings):
        ev_samples = [s for t in timings for s in t.events["samples_us"]]
        e = summarize(ev_samples)
        events = {"median": e.median, "p10": e.p10, "p90": e.p90, "cv": e.cv, "samples_us": list(e.samples_us)}
    return summarize(samples, flushed=first.flushed, method=first.method, events=events or first.events,
                     clock_offset_us=first.clock_offset_us, round_medians=[t.median for t in timings])
