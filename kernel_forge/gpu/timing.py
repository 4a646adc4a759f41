"""The one timing function (GPU side).

``bench`` runs ``warmup`` untimed launches, then ``reps`` timed ones.  Before every timed launch,
outside the timed window, it calls ``prepare`` (poison outputs, reset in/out buffers, restore the
module's globals) and then either ``flush`` (an :class:`~kernel_forge.gpu.flush.L2Flusher`: every
timed launch starts with a cold L2, evict_last lines included) or ``warm`` (``--no-flush``: the
launch's buffers are read into the L2 first, so it starts truly warm).

Two estimates of every timed launch are taken:
- with a kernel ``clock`` (:mod:`.kernel_clock`, CUPTI): the kernels' own GPU time, first start
  to last end of the launch's kernels less the GPU's launch offset — the score
  (``Timing.method == "cupti"``; the clock records only while the timed launches run);
- always: one CUDA event pair around the launch on its stream, kept in ``Timing.events`` (or as
  the samples themselves, ``method == "events"``, when there is no clock or its records do not
  account for every launch).
Kernels cannot start work on other streams (no device runtime is linked; static rules refuse
stream and launch calls), so the events bracket all the device work a candidate does.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernel_forge.common.stats import Timing, median_noise, summarize
from kernel_forge.gpu.flush import L2Flusher  # noqa: F401  (re-exported: the gate's worker builds one per process)
from kernel_forge.gpu.kernel_clock import KernelClock, launch_times


def _events_summary(samples: list[float]) -> dict:
    s = np.asarray(samples, dtype=np.float64)
    mean = float(s.mean())
    return {"median": round(float(np.median(s)), 4), "p10": round(float(np.percentile(s, 10)), 4),
            "p90": round(float(np.percentile(s, 90)), 4),
            "cv": round(float(s.std(ddof=1) / mean) if s.size > 1 and mean > 0 else 0.0, 5),
            "samples_us": [round(float(x), 4) for x in s]}


_EVENTS: list = []


def _event_pairs(n: int) -> list:
    """``2 * n`` CUDA events, made once per process and reused by every call (an event is recorded
    again each time; its elapsed time is read before the next call)."""
    import cupy

    while len(_EVENTS) < 2 * n:
        _EVENTS.append(cupy.cuda.Event())
    return _EVENTS[:2 * n]


def bench(launch: Callable[[], None], stream, *, warmup: int = 10, reps: int = 100,
          flush: L2Flusher | None = None, prepare: Callable[[], None] | None = None,
          after: tuple[int, Callable[[], None]] | None = None, clock: KernelClock | None = None,
          warm: Callable[[], None] | None = None, marker: Callable[[], None] | None = None,
          min_reps: int | None = None, max_noise: float = 0.0) -> Timing:
    """Time ``launch`` (which enqueues one kernel, or a vendor call's kernels, on ``stream``).

    ``prepare`` runs before every launch, ``after = (i, fn)`` runs ``fn`` right after timed launch
    ``i`` (both outside the timed window).  ``prepare``, ``flush``, ``warm`` and ``after`` may
    launch only ``kf_*`` kernels or use memsets/memcpys: with a ``clock``, every other kernel is
    the candidate's.  ``marker`` (an empty ``kf_*`` kernel launch, e.g. ``L2Flusher.mark``) separates
    timed launches for the clock when there is no ``flush``; without either, each candidate kernel
    record counts as one launch.

    **When to stop** (as nvbench's noise criterion): with ``max_noise > 0`` the timed launches run
    in batches — ``min_reps`` first, then as many again as have run — and stop after the first batch
    whose samples so far put the median's 95 % confidence half-width (:func:`median_noise`) within
    ``max_noise`` of it, or at ``reps``.  ``max_noise = 0``: always ``reps``.  Returns every
    sample in µs."""
    if reps < 1:
        raise ValueError("reps must be >= 1")
    first = reps if max_noise <= 0 else min(reps, max(1, int(min_reps or reps)))
    delimited = flush is not None or marker is not None
    events = _event_pairs(reps)
    with stream:
        for _ in range(max(0, warmup)):
            if prepare:
                prepare()
            launch()
        stream.synchronize()
        if clock is not None:
            clock.mark()
        starts: list = []
        ends: list = []
        records: list = []
        done = 0
        while done < reps:
            batch = first if done == 0 else min(reps - done, max(first, done))
            for i in range(done, done + batch):
                if prepare:
                    prepare()
                if flush is not None:
                    flush(stream)
                elif warm is not None:
                    warm()
                if marker is not None and flush is None:
                    marker()
                start, end = events[2 * i], events[2 * i + 1]
                start.record(stream)
                launch()
                end.record(stream)
                starts.append(start)
                ends.append(end)
                if after is not None and after[0] == i:
                    after[1]()
            done += batch
            if done >= reps:
                break
            stream.synchronize()
            if clock is not None:
                records += clock.collect()
            so_far = (launch_times(records, done, delimited=delimited, offset_us=clock.offset_us)
                      if clock is not None else None)
            if so_far is None:
                so_far = _event_us(starts, ends)
            if median_noise(so_far) <= max_noise:
                break
        stream.synchronize()
    events = _event_us(starts, ends)
    flushed = flush is not None
    if clock is not None:
        records += clock.collect()
        clock.pause()
        kernel_us = launch_times(records, done, delimited=delimited, offset_us=clock.offset_us)
        if kernel_us is not None:
            return summarize(kernel_us, flushed=flushed, method="cupti", events=_events_summary(events),
                             clock_offset_us=clock.offset_us)
    return summarize(events, flushed=flushed, method="events")


def _event_us(starts, ends) -> list[float]:
    import cupy

    return [cupy.cuda.get_elapsed_time(s, e) * 1000.0 for s, e in zip(starts, ends)]

