"""The timed launches of one worker run: how many (from the first checked launch's GPU time and
the cost around each launch, measured once), timed with :func:`~kernel_forge.gpu.timing.bench`,
and the outputs they leave as stages of the run: the last timed launch's in every mode, and with
``plan.after_timing`` one chosen timed launch's, kept (masked) as it ends.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

from kernel_forge.gpu import driver
from kernel_forge.gpu.case_run import CaseRun, Snapshot, masked_copy
from kernel_forge.gpu.fingerprint import fingerprint_named
from kernel_forge.gpu.flush import L2Flusher
from kernel_forge.gpu.timing import bench
from kernel_forge.model.task import Task
from kernel_forge.model.worker_protocol import AFTER_TIMING, StageObservation, first_batch, mid_timing, timing_counts

__all__ = ["time_launches"]


def time_launches(run: CaseRun, task: Task, flusher: L2Flusher, clock, prep: Callable[[], None]) -> None:
    """The timed launches (:func:`~kernel_forge.gpu.timing.bench`): their count from the first
    checked launch's GPU time (without one, a launch measured here) and the cost around each
    (resets, flush), measured once.  What the last timed launch left becomes a stage of the
    run in every mode (--quick too: fingerprinted, and compared on the GPU and sampled like the
    first launch unless it is the first launch's bits); with ``plan.after_timing`` the outputs
    of one chosen timed launch become one more.  ``prep`` runs before every launch (the module's
    globals restored, the outputs poisoned: in every mode); ``flusher`` flushes the L2 before each
    unless the plan times warm."""
    import cupy as cp

    stream = run.stream
    plan, obs, launch, bufs, stages = run.plan, run.obs, run.launch, run.bufs, run.stages
    out_arrays, estimate, run_key, mask_key = run.out_arrays, run.estimate, run.run_key, run.mask_key
    flush = flusher if plan.timing.flush_l2 else None
    keep = plan.after_timing      # keep one chosen timed launch's outputs for checks (the last's: always)

    # the cost around each timed launch (resets, flush), measured once, and the launch's own
    start, mid, end = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
    with stream:
        start.record(stream)
        prep()
        if flush is not None:
            flush(stream)
        mid.record(stream)
        if estimate is None:
            launch()
        end.record(stream)
        end.synchronize()
    overhead = cp.cuda.get_elapsed_time(start, mid) * 1e-3
    if estimate is None:
        estimate = cp.cuda.get_elapsed_time(mid, end) * 1e-3
    warmup, reps = timing_counts(estimate, overhead, plan)
    warmup += plan.extra_warmup
    # the kept launch is one of the first batch, which always runs (see timing.bench)
    snap_at = min(reps - 1, max(0, int(plan.snap_fraction * first_batch(reps, plan))))
    snapshot = Snapshot()
    if keep:
        with stream:
            for n, a in out_arrays.items():
                snapshot.arrays[n] = cp.empty_like(a)
    take_snapshot = functools.partial(_take_snapshot, run, snapshot)

    warm = marker = None
    if flush is None:              # --no-flush: truly warm, each timed launch marked for the clock
        buffers = [bufs.kernel_buffer(a.name) for a in task.args if a.is_buffer]
        warm = functools.partial(flusher.warm, buffers, stream)
        marker = functools.partial(flusher.mark, stream)
    obs.timing = bench(launch, stream, warmup=warmup, reps=reps, flush=flush, prepare=prep,
                       after=(snap_at, take_snapshot) if keep else None, clock=clock,
                       warm=warm, marker=marker, min_reps=plan.timing.min_reps, max_noise=plan.timing.max_noise)
    driver.synchronize("timed launches")
    obs.warmup, obs.reps = warmup, len(obs.timing.samples_us)
    # the last timed launch's outputs, in every mode: one fingerprint pass, and one GPU comparison
    # only where they are not bit for bit an earlier stage's (invariant 8)
    add_fps = fingerprint_named(out_arrays, run_key, stream)
    same = next((s.stage for s, _ in stages if s.fingerprints == add_fps), None)
    stages.append((StageObservation(stage=AFTER_TIMING, fingerprints=add_fps, same_as=same),
                   {} if same else dict(out_arrays)))
    if keep:
        obs.snap_at = snap_at
        later = fingerprint_named(snapshot.arrays, run_key, stream, masked_with=mask_key)
        same = next((s.stage for s, _ in stages if s.fingerprints == snapshot.fingerprints), None)
        stage = StageObservation(stage=mid_timing(snap_at), fingerprints=dict(snapshot.fingerprints), same_as=same,
                                 later_fingerprints=later)
        stages.append((stage, {} if same else snapshot.arrays))
        if not same and mask_key is not None:
            run.masked.add(stage.stage)


def _take_snapshot(run: CaseRun, snapshot: Snapshot) -> None:
    """Keep the chosen timed launch's outputs: the fingerprint is read back to the host before
    the next launch, so a later launch that scribbles on the kept copy is found out; the copy
    is kept masked (invariant 11)."""
    snapshot.fingerprints.update(fingerprint_named(run.out_arrays, run.run_key, run.stream))
    for n, a in run.out_arrays.items():
        masked_copy(snapshot.arrays[n], a, run.mask_key, run.stream)
