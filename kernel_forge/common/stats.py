"""Statistics over timing samples. Every sample is kept; the score is the median.

Definitions (documented once, used everywhere): ``median`` is the 50th percentile of the
per-launch event times in microseconds; ``p10``/``p20``/``p80``/``p90`` are NumPy's linear
percentiles; ``cv`` is the sample standard deviation over the mean; ``spread`` is
(p90 - p10) / median.  A task's score is the geometric mean of its performance cases' medians.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    samples_us: tuple[float, ...]
    median: float
    mean: float
    min: float
    max: float
    p10: float
    p20: float
    p80: float
    p90: float
    cv: float
    flushed: bool = True
    graph_us: float | None = None   # per-launch time from CUDA-graph replay (small kernels)
    method: str = "events"          # what the samples are: "cupti" (kernel's own GPU time) or "events"
    events: dict | None = None      # the CUDA-event estimate of the same launches, kept side by side
                                    # when ``method`` is not "events": {"median", "p10", "p90", "cv", "samples_us"}
    clock_offset_us: float | None = None   # method "cupti": the launch offset taken off every sample
    round_medians: tuple[float, ...] | None = None   # side by side: the median of each interleaved round

    @property
    def spread(self) -> float:
        return (self.p90 - self.p10) / self.median if self.median > 0 else 0.0

    def to_json(self, with_samples: bool = True) -> dict:
        d = {k: round(getattr(self, k), 4) for k in ("median", "mean", "min", "max", "p10", "p20",
                                                     "p80", "p90", "cv")}
        d["spread"] = round(self.spread, 4)
        d["n"] = len(self.samples_us)
        d["flushed"] = self.flushed
        if self.graph_us is not None:
            d["graph_us"] = round(self.graph_us, 4)
        d["method"] = self.method
        if self.clock_offset_us is not None:
            d["clock_offset_us"] = round(self.clock_offset_us, 4)
        if self.round_medians is not None:
            d["round_medians"] = [round(m, 4) for m in self.round_medians]
        if self.events is not None:
            ev = dict(self.events)
            if not with_samples:
                ev.pop("samples_us", None)
            d["events"] = ev
        if with_samples:
            d["samples_us"] = [round(s, 4) for s in self.samples_us]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Timing":
        samples = tuple(d.get("samples_us") or [d["median"]])
        t = summarize(samples, flushed=d.get("flushed", True), graph_us=d.get("graph_us"),
                      method=d.get("method", "events"), events=d.get("events"),
                      clock_offset_us=d.get("clock_offset_us"), round_medians=d.get("round_medians"))
        return t


def summarize(samples_us, *, flushed: bool = True, graph_us: float | None = None, method: str = "events",
              events: dict | None = None, clock_offset_us: float | None = None,
              round_medians=None) -> Timing:
    s = np.asarray([float(x) for x in samples_us], dtype=np.float64)
    if s.size == 0:
        raise ValueError("no timing samples")
    if np.any(~np.isfinite(s)) or np.any(s < 0):
        raise ValueError("timing samples must be finite and non-negative")
    mean = float(s.mean())
    std = float(s.std(ddof=1)) if s.size > 1 else 0.0
    p = np.percentile(s, [10, 20, 50, 80, 90])
    return Timing(samples_us=tuple(float(x) for x in s), median=float(p[2]), mean=mean,
                  min=float(s.min()), max=float(s.max()), p10=float(p[0]), p20=float(p[1]),
                  p80=float(p[3]), p90=float(p[4]), cv=(std / mean if mean > 0 else 0.0),
                  flushed=flushed, graph_us=graph_us, method=method, events=events,
                  clock_offset_us=clock_offset_us,
                  round_medians=(tuple(float(m) for m in round_medians) if round_medians is not None else None))


def geomean(values) -> float:
    vals = [float(v) for v in values]
    if not vals or any(v <= 0 or not math.isfinite(v) for v in vals):
        raise ValueError("geometric mean needs positive finite values")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def faster_beyond_noise(new: Timing, old: Timing, *, margin: float = 0.01) -> bool:
    """True when ``new`` is faster than ``old`` by more than the measured noise: the new p80 is
    below the old p20 and the medians differ by more than ``margin`` (relative)."""
    return new.p80 < old.p20 and new.median < old.median * (1.0 - margin)


def noise_band(timing: Timing) -> float:
    """Relative half-width of the p20–p80 band around the median."""
    return (timing.p80 - timing.p20) / (2 * timing.median) if timing.median > 0 else 0.0


def median_noise(samples) -> float:
    """Relative half-width of a distribution-free 95 % confidence interval of the median.

    Sorted samples x(1) <= ... <= x(n); the interval is [x(j), x(k)] with the ranks
    j = n/2 - 0.98 sqrt(n) and k = 1 + n/2 + 0.98 sqrt(n), rounded (the normal approximation to
    the binomial order-statistic bound: (2, 9) for n = 10, (6, 15) for n = 20), so nothing is
    assumed about the samples' distribution.  Returns inf below 5 samples."""
    s = np.sort(np.asarray([float(x) for x in samples], dtype=np.float64))
    n = int(s.size)
    if n < 5:
        return math.inf
    half = 0.98 * math.sqrt(n)
    j = max(int(round(n / 2 - half)), 1)
    k = min(int(round(1 + n / 2 + half)), n)
    med = float(np.median(s))
    return float(s[k - 1] - s[j - 1]) / (2 * med) if med > 0 else 0.0


def median_uncertainty(timing: Timing) -> float:
    """Relative half-width of the uncertainty of ``timing``'s median, from a side-by-side
    re-measurement: the wider of

    * the distribution-free 95 % confidence interval of the median over the pooled samples
      (:func:`median_noise`: order statistics, nothing assumed about the distribution), and
    * half the range of the per-round medians (``round_medians``: the interleaved rounds of
      ``Gate.retime``), which catches a drift between rounds (clocks, another process) that the
      pooled samples alone would read as spread, not as a shifted median.

    Not the spread of the samples: a case timed 100 times with a wide p20-p80 band can still have a
    tight median.  Below 5 samples (``--reps`` under 3), where the interval is not defined, half
    the whole range of the samples stands in for it."""
    s = timing.samples_us
    if len(s) < 5:
        u = (max(s) - min(s)) / (2 * timing.median) if timing.median > 0 else 0.0
    else:
        u = median_noise(s)
    rm = [m for m in (timing.round_medians or ()) if m > 0]
    if len(rm) >= 2 and timing.median > 0:
        u = max(u, (max(rm) - min(rm)) / (2 * timing.median))
    return u
