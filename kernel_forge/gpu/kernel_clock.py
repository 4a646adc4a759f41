"""The kernel's own GPU time, from CUPTI activity records (NVIDIA's ``cupti-python``).

CUDA events around a launch add 2-8 µs on an H200 (the event pair, the front end, the gap before
the kernel starts); Nsight Compute's ``gpu__time_duration`` does not.  CUPTI's concurrent-kernel
activity records carry each kernel's start and end as the GPU saw them, the same quantity ncu
reports, so the gate takes its samples from them and keeps the event estimate beside them.

Facts this relies on (measured on the H200, bench/evidence/h200-2026-12-01-s4/probe/):
- records arrive only when the activity kind is enabled **before** the process creates its CUDA
  context, so :func:`enable` is the first thing the gate's worker does;
- external-correlation records do not arrive without API activity kinds, so records are matched to
  launches by order and name: every kernel the harness itself launches is named ``kf_*``, and the
  kernels between two harness kernels belong to the candidate (see ``timing.bench``).

``KFORGE_CLOCK=events`` turns the clock off (events only).  Without cupti-python, or when CUPTI
refuses (another profiler attached, e.g. under ncu), :func:`enable` says why and the gate times
with events.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

HARNESS_PREFIX = "kf_"   #: kernels whose names start with this are the harness's own


@dataclass(frozen=True)
class KernelRecord:
    name: str
    start_ns: int
    end_ns: int

    @property
    def harness(self) -> bool:
        return self.name.startswith(HARNESS_PREFIX)


class KernelClock:
    """Collects the process's kernel activity records between :meth:`mark` and :meth:`collect`."""

    def __init__(self, cupti):
        self._cupti = cupti
        self._lock = threading.Lock()
        self._records: list[KernelRecord] = []
        self.verified = False     #: a collect has returned records (they do arrive in this process)

    # CUPTI calls these from its own thread
    def _requested(self):
        return 8 << 20, 0

    def _completed(self, activities) -> None:
        kind = self._cupti.ActivityKind.CONCURRENT_KERNEL
        got = [KernelRecord(str(a.name), int(a.start), int(a.end)) for a in activities if a.kind == kind]
        with self._lock:
            self._records.extend(got)

    def _flush(self) -> None:
        self._cupti.activity_flush_all(1)

    def mark(self) -> None:
        """Forget every record so far (call with the stream idle)."""
        self._flush()
        with self._lock:
            self._records.clear()

    def collect(self) -> list[KernelRecord]:
        """The records since :meth:`mark`, in start order (call after synchronising the stream)."""
        self._flush()
        with self._lock:
            out, self._records = self._records, []
        if out:
            self.verified = True
        return sorted(out, key=lambda r: (r.start_ns, r.end_ns))


_clock: KernelClock | None = None
_reason: str | None = "kernel_clock.enable() was not called"


def enable() -> str | None:
    """Turn on CUPTI kernel records for this process.  Call before the CUDA context exists.
    Returns None when the clock is on, else why it is off."""
    global _clock, _reason
    if _clock is not None:
        return None
    if os.environ.get("KFORGE_CLOCK", "").strip().lower() == "events":
        _reason = "KFORGE_CLOCK=events"
        return _reason
    try:
        from cupti import cupti
    except Exception as exc:  # noqa: BLE001 - not installed, or its CUDA libraries are missing
        _reason = f"cupti-python is unavailable ({type(exc).__name__}: {exc}); pip install cupti-python"
        return _reason
    clock = KernelClock(cupti)
    try:
        cupti.activity_register_callbacks(clock._requested, clock._completed)
        cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
    except Exception as exc:  # noqa: BLE001 - e.g. another profiler holds CUPTI
        _reason = f"CUPTI refused kernel activity records ({type(exc).__name__}: {exc})"
        return _reason
    _clock, _reason = clock, None
    return None


def clock() -> KernelClock | None:
    """The process's clock when :func:`enable` turned it on, else None."""
    return _clock


def reason() -> str | None:
    """Why there is no clock (None when there is one)."""
    return _reason


def disable(why: str) -> None:
    """Stop using the clock in this process (e.g. its records never arrived)."""
    global _clock, _reason
    _clock, _reason = None, why


def launch_times(records: list[KernelRecord], launches: int, *, delimited: bool) -> list[float] | None:
    """Per-launch GPU time in µs from the records of ``launches`` timed launches.

    ``delimited``: every timed launch was preceded by at least one harness (``kf_*``) kernel, so a
    launch is the run of candidate kernels after a harness kernel, timed from its first start to
    its last end.  Otherwise each candidate kernel record is one launch.  None when the records do
    not account for exactly ``launches`` launches (the caller falls back to events)."""
    groups: list[list[KernelRecord]] = []
    if delimited:
        current: list[KernelRecord] | None = None
        for r in records:
            if r.harness:
                if current:
                    groups.append(current)
                current = []
            elif current is not None:
                current.append(r)
        if current:
            groups.append(current)
    else:
        groups = [[r] for r in records if not r.harness]
    if len(groups) != launches:
        return None
    return [(max(r.end_ns for r in g) - min(r.start_ns for r in g)) / 1000.0 for g in groups]
