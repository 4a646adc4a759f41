"""One performance case's diagnosis: its time, its place on the roofline, the bound it implies,
the kernel's resources and profile there, and what limits it (:mod:`.limiter`)."""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CaseDiagnosis"]


@dataclass
class CaseDiagnosis:
    name: str
    median_us: float
    pct_bandwidth: float | None = None        #: % of the measured copy bandwidth
    pct_compute: float | None = None          #: % of the compute peak that applies to the task
    bound: str = "unknown"                    #: "memory" | "compute" | "pipe" | "latency" | "unknown"
    vs_initial: float | None = None           #: initial median / this median (>1: faster)
    vs_baselines: dict = field(default_factory=dict)   #: baseline name -> baseline median / this median
    vars: dict = field(default_factory=dict)  #: the case's variables (sizes)
    p10_us: float | None = None
    p90_us: float | None = None
    initial_us: float | None = None           #: the initial kernel's median on this case
    baseline_us: dict = field(default_factory=dict)    #: baseline name -> its median (µs)
    gbps: float | None = None                 #: cost-model bytes / median
    tflops: float | None = None               #: cost-model FLOPs / median
    intensity: float | None = None            #: cost-model FLOPs per byte
    bound_why: str = ""                       #: the numbers behind ``bound``, one phrase
    launch: dict | None = None                #: resolved grid, block, shared_mem
    blocks: int | None = None                 #: blocks in the grid
    waves: float | None = None                #: blocks / (resident blocks per SM x SMs)
    resources: dict | None = None            #: CaseResult.resources (registers ... occupancy_limiter)
    resources_source: str = ""               #: "driver" (the worker's cuOccupancy...) | "computed" (ptxas + launch)
    profile: dict | None = None               #: this case's profiler summary (profile.summarise_row)
    #: how busy the task's arithmetic pipe is: {"pct", "pipe" ("FMA" | "tensor"), "source" (what measured it)}
    pipe_busy: dict | None = None
    #: what limits the kernel here, where it can be named: {"key", "what", "evidence", "advice"}
    limiter: dict | None = None
