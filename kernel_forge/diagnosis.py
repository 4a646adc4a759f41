"""What limits the current best kernel, per performance case (a first cut; see the module's tests).

:func:`diagnose` reads an attempt's evaluation (``Evaluation.to_json()``), the initial kernel's and
the vendor baselines', the device description and its calibration, and an optional profile
(:meth:`GateLike.profile`), and returns a :class:`Diagnosis` that the prompt, ``summary.json`` and
``report.md`` all show.  :func:`directions` turns it into distinct directions for the ``n``
proposals of one iteration.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .task import Task


@dataclass
class CaseDiagnosis:
    name: str
    median_us: float
    pct_bandwidth: float | None = None        #: % of the measured copy bandwidth
    pct_compute: float | None = None          #: % of the compute peak that applies to the task
    bound: str = "unknown"                    #: "memory" | "compute" | "latency" | "unknown"
    vs_initial: float | None = None           #: initial median / this median (>1: faster)
    vs_baselines: dict = field(default_factory=dict)   #: baseline name -> baseline median / this median


@dataclass
class Diagnosis:
    cases: list[CaseDiagnosis] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        lines = []
        for c in self.cases:
            parts = [f"{c.name}: {c.median_us:.2f} µs", f"bound: {c.bound}"]
            if c.pct_bandwidth is not None:
                parts.append(f"{c.pct_bandwidth:.0f}% of measured bandwidth")
            if c.pct_compute is not None:
                parts.append(f"{c.pct_compute:.0f}% of compute peak")
            lines.append("- " + "; ".join(parts))
        return "\n".join(lines + [f"- {n}" for n in self.notes])


def _timed(ev: dict | None) -> dict[str, dict]:
    return {c["name"]: c for c in (ev or {}).get("cases", []) if c.get("timing") and c.get("role") == "performance"}


def diagnose(task: Task, best: dict, *, initial: dict | None = None, baselines: dict[str, dict] | None = None,
             device: dict | None = None, calibration: dict | None = None, profile: dict | None = None) -> Diagnosis:
    """The diagnosis of ``best`` (an Evaluation JSON)."""
    out = Diagnosis()
    init = _timed(initial)
    bases = {k: _timed(v) for k, v in (baselines or {}).items()}
    for name, c in _timed(best).items():
        med = c["timing"]["median"]
        d = CaseDiagnosis(name=name, median_us=med, pct_bandwidth=c.get("pct_peak_bw"),
                          pct_compute=c.get("pct_peak_flops"))
        if name in init:
            d.vs_initial = init[name]["timing"]["median"] / med
        for b, cases in bases.items():
            if name in cases:
                d.vs_baselines[b] = cases[name]["timing"]["median"] / med
        out.cases.append(d)
    return out


def directions(diagnosis: Diagnosis, n: int) -> list[str]:
    """``n`` distinct directions for the proposals of one iteration."""
    base = ["reduce the bytes moved per output (vectorised, coalesced accesses; fuse passes)",
            "increase the work in flight per SM (occupancy, more independent loads per thread)",
            "restructure the computation (tiling, shared-memory reuse, register blocking)",
            "tune the launch configuration and tunables of the current best"]
    return [base[i % len(base)] for i in range(n)]
