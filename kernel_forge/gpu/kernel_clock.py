"""The kernel's own GPU time, from CUPTI activity records (NVIDIA's ``cupti-python``).

CUDA events around a launch add 2-8 µs on an H200 (the event pair, the front end, the gap before
the kernel starts); Nsight Compute's ``gpu__time_duration`` does not.  CUPTI's kernel activity
records carry each kernel's start and end as the GPU saw them, so the gate takes its samples from
them and keeps the event estimate beside them.

Facts this relies on (measured on the H200, bench/evidence/h200-2026-12-01-s5/probe/FINDINGS.md):
- the record kind is ``KERNEL`` (serialized kernels), not ``CONCURRENT_KERNEL``: to time
  concurrent kernels CUPTI instruments every block, which made a 65,536-block vector add 7 % and
  a 262,144-block one 6 % slower than under ncu; ``KERNEL`` records add no instrumentation
  (the gate's kernels run one at a time on one stream anyway);
- a ``KERNEL`` record spans the front end's processing of the launch as well: on the H200 it is
  a constant 0.86 µs longer than ncu's ``gpu__time_duration`` (median over kernels of 1-4,096
  blocks running 0-20 µs, range 0.45-0.99 µs).  The worker measures that share on the GPU in
  front of it when it starts, with self-timing spin kernels, and caches it per GPU and driver
  (:mod:`.clock_offset`; the H200's figure stays as a cross-check, ``KFORGE_CLOCK_OFFSET_US``
  overrides); it is subtracted from every launch and every timing records it;
- records arrive only when the kind is enabled **before** the process creates its CUDA context,
  so :func:`enable` is the first thing the gate's worker does; after that the kind can be
  switched off and on, so records are made only while timed launches run (:meth:`KernelClock.mark`
  to :meth:`KernelClock.pause`): turning each record into a Python object costs about 80 µs;
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

from kernel_forge.gpu.clock_offset import KNOWN_US

HARNESS_PREFIX = "kf_"   #: kernels whose names start with this are the harness's own

#: GPU model -> µs a KERNEL record spans beyond ncu's gpu__time_duration of the same launch
#: (H200: bench/evidence/h200-2026-12-01-s5/probe/probe_round5.py --sections offset, against PROBE_NCU_SPIN=1 ... --sections ncu);
#: a cross-check only: the offset is measured (clock_offset.py)
LAUNCH_OFFSET_US = KNOWN_US


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

    def __init__(self, cupti, kind=None):
        self._cupti = cupti
        self.kind = kind if kind is not None else cupti.ActivityKind.KERNEL
        self._kinds = {int(cupti.ActivityKind.KERNEL), int(cupti.ActivityKind.CONCURRENT_KERNEL)}
        self._lock = threading.Lock()
        self._records: list[KernelRecord] = []
        self.verified = False     #: a collect has returned records (they do arrive in this process)
        self.recording = True     #: records are being made (enabled before the context, as CUPTI needs)
        self.offset_us = 0.0      #: subtracted from every launch's time (clock_offset.py)
        self.offset_source = "none"
        self.offset: dict | None = None   #: the whole choice: value, source, measurement, warning

    # CUPTI calls these from its own thread
    def _requested(self):
        return 8 << 20, 0

    def _completed(self, activities) -> None:
        kinds = self._kinds
        got = [KernelRecord(str(a.name), int(a.start), int(a.end)) for a in activities if int(a.kind) in kinds]
        with self._lock:
            self._records.extend(got)

    def _flush(self) -> None:
        self._cupti.activity_flush_all(1)

    def for_device(self, info, stream, flush=None) -> dict:
        """Take the launch offset for the GPU ``info`` (a DeviceInfo): ``KFORGE_CLOCK_OFFSET_US``,
        else this GPU and driver's cached measurement, else one made now on ``stream`` (then
        cached), each spin after ``flush(stream)`` (the gate's L2 flush) as a timed launch is.
        Returns the choice as a dict (recorded with the worker's facts)."""
        from kernel_forge.gpu import clock_offset

        got = clock_offset.choose(info.name, info.driver_version,
                                  lambda: clock_offset.measure(self, stream, info.sms, flush=flush))
        self.offset_us, self.offset_source = float(got.offset_us), got.source
        self.offset = got.to_json()
        return self.offset

    def mark(self) -> None:
        """Forget every record so far and record from now on (call with the stream idle)."""
        self._flush()
        with self._lock:
            self._records.clear()
        if not self.recording:
            self._cupti.activity_enable(self.kind)
            self.recording = True

    def pause(self) -> None:
        """Stop making records until the next :meth:`mark` (call with the stream idle)."""
        if self.recording:
            self._flush()
            self._cupti.activity_disable(self.kind)
            self.recording = False
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
        cupti.activity_enable(clock.kind)
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


def launch_times(records: list[KernelRecord], launches: int, *, delimited: bool,
                 offset_us: float = 0.0) -> list[float] | None:
    """Per-launch GPU time in µs from the records of ``launches`` timed launches, each less
    ``offset_us`` (the front end's share of a record, once per launch; never below 0).  None
    when a record ends before it starts.

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
    spans = [(max(r.end_ns for r in g) - min(r.start_ns for r in g)) / 1000.0 for g in groups]
    if any(s < 0 for s in spans):
        return None                     # records out of order: not a clock to trust
    return [max(0.0, s - offset_us) for s in spans]
