"""The kernel clock's launch offset, measured on the GPU in front of it (and cached).

A CUPTI ``KERNEL`` record spans the front end's processing of a launch as well as the kernel:
on the H200 it was 0.86 µs longer than Nsight Compute's ``gpu__time_duration`` of the same
launch (bench/evidence/h200-2026-12-01-s5/probe/FINDINGS.md), whatever the kernel's length or
block count.  That share is subtracted from every timed launch.  It is measured here, when the
worker starts, with self-timing spin kernels (each block reads ``%globaltimer`` when it starts
and when it ends, as bench/evidence/h200-2026-12-01-s5/probe/probe_round5.py's offset section did):

- ``R`` = record duration − the kernel's own span (first block's start to last block's end),
  measured with records on, for single-wave grids (1 block and one block per SM) of 0, 5 and
  20 µs, **each launched right after the gate's own L2 flush**, as every timed launch is: what a
  record holds beyond the kernel's own execution in the gate's conditions (2.27-2.82 µs on the
  H200, probe/offset-KERNEL.json).  Launched back to back instead (each spin queued behind the
  previous spin) a record is shorter: 2.08 µs on the H200 (the first version of this module
  measured that way and got 0.544 µs, bench/evidence/h200-2026-12-02-s6); those samples are kept
  as ``samples["R_back_to_back"]`` for comparison, not used;
- ``N`` = the gap between a kernel's last block ending and the next kernel's first block
  starting, launched back to back with records off (the second launch is queued while the first
  spins, so its front-end work is hidden): the block launch and drain latency that ncu's
  duration counts but a kernel's own span does not (1.54 µs on the H200; ncu minus span of the
  same single-wave spins: 1.57-1.95 µs);
- the offset is ``mean(R) − mean(N)``, each a trimmed mean (the middle 60 % of the samples):
  ``%globaltimer`` advances in steps (32 ns with records on, 256 ns with them off on the H200),
  so a median lands on a step while a mean of many samples, each at a random phase of the
  step, does not.

The result is cached per GPU model and driver in the user cache directory
(``KFORGE_CACHE_DIR`` or ``~/.cache/kernel_forge``/``clock-offset.json``), so a worker measures
once per machine.  :data:`KNOWN_US` (0.86 µs for the H200, from the probe against ncu) stays
only as a cross-check: a measurement more than :data:`DISAGREE_US` away from it is still used,
with a warning in the record.  ``KFORGE_CLOCK_OFFSET_US`` overrides all of it (a number of µs,
0-50; anything else is refused).
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernel_forge.common import writes
from kernel_forge.common.errors import InputError

ENV = "KFORGE_CLOCK_OFFSET_US"
#: GPU model -> µs a KERNEL record spans beyond ncu's gpu__time_duration (measured against ncu;
#: a cross-check of the measurement, not a source)
KNOWN_US = {"NVIDIA H200": 0.86}
#: a measurement this far from KNOWN_US is flagged (the H200's per-kernel range was 0.45-0.99 µs)
DISAGREE_US = 0.4
#: the largest offset taken as a measurement (a record's whole front end is a few µs at most)
MAX_US = 5.0
#: spin lengths (ns) and launches per configuration
SPINS_NS = (0, 5_000, 20_000)
REPEATS = 7
#: back-to-back pairs per grid size for N
PAIRS = 12
#: the first kernel of each back-to-back pair spins this long, so the second is queued behind it
PAIR_SPIN_NS = 30_000
#: the share of samples at each end a trimmed mean leaves out
TRIM = 0.2
#: bumped when the method changes (cached values of another method are measured again)
METHOD = "spin-flushed-R-minus-N/2"

SOURCE = r"""
extern "C" __global__ void kf_clock_spin(unsigned long long* out, long long spin_ns) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)); } while ((long long)(t1 - t0) < spin_ns);
    __syncthreads();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    if (threadIdx.x == 0) { out[2 * blockIdx.x] = t0; out[2 * blockIdx.x + 1] = t1; }
}
"""
KERNEL = "kf_clock_spin"


@dataclass
class Offset:
    """The offset the clock subtracts, where it came from, and the measurement behind it."""

    offset_us: float
    source: str                        #: "measured", "cached", "KFORGE_CLOCK_OFFSET_US", "table", "none"
    gpu: str = ""
    driver: str = ""
    record_minus_span_us: float | None = None   #: median R
    launch_gap_us: float | None = None          #: median N
    samples: dict = field(default_factory=dict)  #: {"R": [...], "N": [...]}
    known_us: float | None = None      #: KNOWN_US for this GPU, if any
    warning: str = ""                  #: set when the measurement disagrees with KNOWN_US, or failed
    measured_at: float = 0.0
    method: str = METHOD

    def to_json(self) -> dict:
        d = asdict(self)
        d["offset_us"] = round(self.offset_us, 4)
        return d


def env_offset() -> float | None:
    """``KFORGE_CLOCK_OFFSET_US`` as a number of µs, None when unset; raises InputError when it is
    not a finite number in [0, 50]."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{ENV}={raw!r} is not a number",
                         hint=f"set it to the µs to take off every timed launch (e.g. {ENV}=0.86), or unset it "
                              "to measure the offset on this GPU") from None
    if not math.isfinite(value) or not 0.0 <= value <= 50.0:
        raise InputError(f"{ENV}={raw!r} is outside 0-50 µs",
                         hint="a launch offset is a fraction of a µs to a few µs; unset it to measure it")
    return value


def trimmed_mean(samples: list[float], trim: float = TRIM) -> float:
    """The mean of the middle ``1 - 2 * trim`` of the samples (all of them when too few to trim)."""
    xs = sorted(samples)
    k = int(len(xs) * trim)
    mid = xs[k:len(xs) - k] or xs
    return sum(mid) / len(mid)


def derive(r_samples: list[float], n_samples: list[float], gpu: str) -> tuple[float | None, str]:
    """The offset from the measured R and N samples (µs), or None and why not."""
    r = [x for x in r_samples if math.isfinite(x)]
    n = [x for x in n_samples if math.isfinite(x)]
    if len(r) < 3 or len(n) < 3:
        return None, f"too few samples (R {len(r)}, N {len(n)})"
    value = trimmed_mean(r) - trimmed_mean(n)
    if not 0.0 <= value <= MAX_US:
        return None, (f"implausible offset {value:.3f} µs (record - span {trimmed_mean(r):.3f} µs, "
                      f"launch gap {trimmed_mean(n):.3f} µs)")
    return value, ""


def cross_check(value: float, gpu: str) -> str:
    """A warning when ``value`` is far from the probe's figure for this GPU model (else '')."""
    known = KNOWN_US.get(gpu)
    if known is None or abs(value - known) <= DISAGREE_US:
        return ""
    return (f"the measured launch offset {value:.3f} µs differs from the {known:.2f} µs measured against "
            f"Nsight Compute on an {gpu} by more than {DISAGREE_US} µs; times may differ from ncu's by that much")


# -- the cache ---------------------------------------------------------------------------------

def cache_path() -> Path:
    env = os.environ.get("KFORGE_CACHE_DIR")
    if env:
        return Path(env) / "clock-offset.json"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernel_forge" / "clock-offset.json"


def cache_key(gpu: str, driver: str) -> str:
    return f"{gpu} | driver {driver}"


def load_cached(gpu: str, driver: str) -> Offset | None:
    """The cached measurement for this GPU model and driver (None if absent, unreadable, or made
    by another method)."""
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
        d = data[cache_key(gpu, driver)]
        if d.get("method") != METHOD:
            return None
        got = Offset(**{k: v for k, v in d.items() if k in Offset.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(got.offset_us, (int, float)) or not 0.0 <= float(got.offset_us) <= MAX_US:
        return None
    got.source = "cached"
    return got


def store(entry: Offset) -> None:
    """Add ``entry`` to the cache (atomically; a cache that cannot be written is skipped)."""
    path = cache_path()
    try:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
        data[cache_key(entry.gpu, entry.driver)] = entry.to_json() | {"source": "measured"}
        writes.write_text(path, json.dumps(data, indent=1, sort_keys=True))
    except (OSError, writes.WriteFailed):
        pass


# -- choosing ----------------------------------------------------------------------------------

def choose(gpu: str, driver: str, measure) -> Offset:
    """The offset for this worker: the environment's, else the cache's, else ``measure()``'s
    (which returns (R samples, N samples) or raises), stored in the cache; if measuring fails,
    the table's value for this GPU (or 0) with the reason in ``warning``."""
    env = env_offset()
    if env is not None:
        return Offset(env, ENV, gpu, driver, known_us=KNOWN_US.get(gpu))
    cached = load_cached(gpu, driver)
    if cached is not None:
        return cached
    why = ""
    extra: dict = {}
    try:
        got = measure()
        r, n = got[0], got[1]
        extra = dict(got[2]) if len(got) > 2 else {}
    except Exception as exc:  # noqa: BLE001 - no measurement: say why, fall back
        r, n, why = [], [], f"{type(exc).__name__}: {exc}"
    value, problem = derive(r, n, gpu) if not why else (None, why)
    known = KNOWN_US.get(gpu)
    if value is None:
        fallback = known if known is not None else 0.0
        return Offset(fallback, "table" if known is not None else "none", gpu, driver,
                      samples={"R": r, "N": n}, known_us=known,
                      warning=f"the launch offset could not be measured ({problem}); using {fallback} µs")
    samples = {"R": [round(x, 4) for x in r], "N": [round(x, 4) for x in n]}
    samples.update({k: [round(float(x), 4) for x in v] for k, v in extra.items()})
    entry = Offset(value, "measured", gpu, driver, record_minus_span_us=round(trimmed_mean(r), 4),
                   launch_gap_us=round(trimmed_mean(n), 4), samples=samples,
                   known_us=known, warning=cross_check(value, gpu), measured_at=time.time())
    store(entry)
    return entry


# -- the measurement (GPU) ---------------------------------------------------------------------

def measure(clock, stream, sms: int, flush=None) -> tuple[list[float], list[float], dict]:
    """(R samples, N samples, {"R_back_to_back": samples}) in µs, see the module docstring.
    ``clock`` is the process's :class:`~.kernel_clock.KernelClock` (left paused); ``flush(stream)``
    is the gate's L2 flush, launched before every R spin as before every timed launch (without
    one, R is measured back to back)."""
    import cupy
    import numpy as np

    kern = cupy.RawModule(code=SOURCE).get_function(KERNEL)
    configs = [(blocks, ns) for blocks in sorted({1, max(1, int(sms))}) for ns in SPINS_NS]
    width = 2 * max(1, int(sms))

    def spin(buf, blocks: int, ns: int) -> None:
        kern((blocks,), (32,), (buf, np.int64(ns)))

    def spans(host: np.ndarray, blocks: int) -> tuple[float, float]:
        v = host[:2 * blocks].reshape(-1, 2).astype(np.float64)
        return float(v[:, 0].min()), float(v[:, 1].max())

    def record_excess(before) -> list[float]:
        """Record duration - own span of REPEATS x configs spins, each after ``before()``."""
        n_launch = len(configs) * REPEATS
        with stream:
            out = cupy.zeros((n_launch, width), dtype=cupy.uint64)   # zeroed on the stream itself
            stream.synchronize()
            clock.mark()
            order = []
            for i in range(n_launch):
                blocks, ns = configs[i % len(configs)]
                before()
                spin(out[i], blocks, ns)
                order.append((i, blocks))
            stream.synchronize()
            records = [r for r in clock.collect() if r.name == KERNEL]
            host = cupy.asnumpy(out)
        if len(records) != n_launch:
            return []
        got = []
        for (i, blocks), rec in zip(order, records):
            t0, t1 = spans(host[i], blocks)
            got.append((rec.end_ns - rec.start_ns) / 1000.0 - (t1 - t0) / 1000.0)
        return got

    with stream:
        warm = cupy.zeros((1, width), dtype=cupy.uint64)
        spin(warm[0], 1, 0)            # the module and the path once, unrecorded
        if flush is not None:
            flush(stream)
        stream.synchronize()
    # R: record duration - own span, records on; after the gate's flush (its timing conditions)
    r_samples = record_excess((lambda: flush(stream)) if flush is not None else (lambda: None))
    r_b2b = record_excess(lambda: None) if flush is not None else list(r_samples)
    clock.pause()
    # N: gap from one kernel's last block end to the next kernel's first block start, records off
    pairs = [(blocks, k) for blocks in sorted({1, max(1, int(sms))}) for k in range(PAIRS)]
    with stream:
        first = cupy.zeros((len(pairs), width), dtype=cupy.uint64)
        second = cupy.zeros((len(pairs), width), dtype=cupy.uint64)
        for j, (blocks, _k) in enumerate(pairs):
            spin(first[j], blocks, PAIR_SPIN_NS)
            spin(second[j], blocks, 0)
            stream.synchronize()
        h1, h2 = cupy.asnumpy(first), cupy.asnumpy(second)
    n_samples = []
    for j, (blocks, _k) in enumerate(pairs):
        _a0, a1 = spans(h1[j], blocks)
        b0, _b1 = spans(h2[j], blocks)
        n_samples.append((b0 - a1) / 1000.0)
    return r_samples, n_samples, {"R_back_to_back": r_b2b}
