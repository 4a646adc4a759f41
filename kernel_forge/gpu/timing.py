"""The one timing function (GPU side): CUDA events around each launch.

``bench`` runs ``warmup`` untimed launches, then ``reps`` timed ones.  Before every timed
launch, outside the timed window, it calls ``prepare`` (resets in/out buffers) and, if
``flush``, writes a buffer of twice the L2 size so every launch starts with a cold L2.  One
event pair brackets each launch on the launch stream; every sample is kept.  Kernels cannot
start work on other streams (no device runtime is linked and static rules refuse stream and
launch calls), so the pair brackets all the device work a candidate does.
"""
from __future__ import annotations

from collections.abc import Callable

from ..stats import Timing, summarize


class L2Flusher:
    def __init__(self, l2_bytes: int):
        import cupy

        self.buf = cupy.empty(max(2 * int(l2_bytes), 64 << 20), dtype=cupy.uint8)

    def __call__(self, stream) -> None:
        with stream:
            self.buf.fill(0)


def bench(launch: Callable[[], None], stream, *, warmup: int = 10, reps: int = 100,
          flush: L2Flusher | None = None, prepare: Callable[[], None] | None = None,
          after: tuple[int, Callable[[], None]] | None = None) -> Timing:
    """Time ``launch`` (which enqueues one kernel on ``stream``). Returns all samples in µs.

    ``prepare`` runs before every launch, ``after = (i, fn)`` runs ``fn`` right after timed
    launch ``i`` (both outside the timed window: the gate uses them to poison outputs and to
    snapshot the outputs of one randomly chosen timed launch)."""
    import cupy

    if reps < 1:
        raise ValueError("reps must be >= 1")
    with stream:
        for _ in range(max(0, warmup)):
            if prepare:
                prepare()
            launch()
        stream.synchronize()
        starts = [cupy.cuda.Event() for _ in range(reps)]
        ends = [cupy.cuda.Event() for _ in range(reps)]
        for i in range(reps):
            if prepare:
                prepare()
            if flush is not None:
                flush(stream)
            starts[i].record(stream)
            launch()
            ends[i].record(stream)
            if after is not None and after[0] == i:
                after[1]()
        stream.synchronize()
    samples = [cupy.cuda.get_elapsed_time(s, e) * 1000.0 for s, e in zip(starts, ends)]
    timing = summarize(samples, flushed=flush is not None)
    return timing
