"""What the gate says about a candidate: data, never exceptions.

Every failure has a reason code from :data:`REASONS`; the loop, the prompt and the evidence
all read these records.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kernel_forge.common.stats import Timing

#: reason code → one-line meaning (shown in reports and prompts)
REASONS = {
    "passed": "all checks passed",
    "bad_candidate": "the kernel file's kforge header or launch is unusable",
    "static_rule": "the source uses something a candidate may not (library calls, timers, streams)",
    "signature_mismatch": "the kernel's parameters differ from the task's signature",
    "compile_error": "NVRTC could not compile the source",
    "launch_config": "the launch configuration exceeds this GPU's limits or does not evaluate",
    "launch_failed": "the driver refused or failed the launch",
    "crash": "the kernel faulted (illegal address, trap); its context was discarded",
    "timeout": "the kernel did not finish in time and its worker was killed",
    "out_of_memory": "the GPU ran out of memory",
    "worker_died": "the worker process died without an answer",
    "mismatch": "outputs differ from the reference beyond tolerance",
    "unwritten": "some output elements were never written (still hold the poison value)",
    "input_modified": "a const input buffer was changed",
    "nondeterministic": "repeated launches on the same inputs gave different outputs",
    "stale_after_timing": "outputs were wrong after the timed launches",
    "implausible": "faster than this GPU's memory bandwidth or arithmetic rate allows",
    "sanitizer": "compute-sanitizer reported an error",
    "reference_error": "the reference failed (a problem with the task, not the candidate)",
    "harness_error": "kernel_forge's own machinery failed (a snapshot, copy, memset or comparison of its own; the "
                     "message says which): not a verdict on the kernel (please report)",
    "skipped": "not run because an earlier case failed",
    "duplicate": "the same normalised source, launch and defines as an earlier attempt (not gated again)",
    "launch_conflict": "the kernel's kforge header and the proposal's launch say different things",
    "tampered": "memory the gate keeps for checking (expected values, initial values) changed during the run, "
                "or the GPU comparison disagreed with elements the gate sampled",
}


#: reasons that say nothing about the kernel: the harness or the task's reference failed.  The
#: loop never shows such an attempt to a model as a failure to fix.
NOT_THE_KERNELS_FAULT = frozenset({"harness_error", "reference_error"})


@dataclass
class CaseResult:
    name: str
    role: str
    passed: bool
    reason: str = "passed"
    message: str = ""
    seeds: list[int] = field(default_factory=list)
    outputs: list[dict] = field(default_factory=list)     # verify.OutputCheck.to_json()
    timing: Timing | None = None
    launch: dict | None = None
    flops: float | None = None
    bytes: float | None = None
    gbps: float | None = None
    tflops: float | None = None
    pct_peak_bw: float | None = None
    pct_peak_flops: float | None = None
    code: str = ""                                        # CUDA error name, when there is one
    #: what the compiled kernel uses and the occupancy it allows for this case's launch:
    #: registers, spill_stores, spill_loads, static_smem, dynamic_smem, local_bytes,
    #: threads_per_block, blocks_per_sm (cuOccupancyMaxActiveBlocksPerMultiprocessor),
    #: warps_per_sm, occupancy (0-1), occupancy_limiter ("registers" | "shared_memory" | "threads" | "blocks")
    resources: dict | None = None
    #: the module's globals, restored before every launch, and which of them launches changed
    #: (evidence, not a verdict): {"globals": {name: bytes}, "changed": {stage: [names]}}
    module_state: dict | None = None
    #: the dispatch-rule line this case ran with, when the kernel carries a rule (dispatch.py):
    #: {"branch": index, "when": condition or "default", "defines": {...}}
    variant: dict | None = None

    @property
    def median_us(self) -> float | None:
        return self.timing.median if self.timing else None

    def to_json(self, with_samples: bool = True) -> dict:
        d = {k: getattr(self, k) for k in ("name", "role", "passed", "reason", "message", "seeds",
                                           "outputs", "launch", "flops", "bytes", "gbps", "tflops",
                                           "pct_peak_bw", "pct_peak_flops", "code", "resources",
                                           "module_state")}
        d["timing"] = self.timing.to_json(with_samples) if self.timing else None
        if self.variant is not None:
            d["variant"] = self.variant
        return d

    @classmethod
    def from_json(cls, d: dict) -> "CaseResult":
        d = dict(d)
        t = d.pop("timing", None)
        r = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        r.timing = Timing.from_json(t) if t else None
        return r


@dataclass
class Evaluation:
    """The gate's verdict on one candidate."""

    label: str
    passed: bool
    reason: str = "passed"
    message: str = ""
    cases: list[CaseResult] = field(default_factory=list)
    score_us: float | None = None        # geomean of performance-case medians
    compile: dict | None = None
    defines: dict = field(default_factory=dict)
    sha256: str = ""
    seconds: float = 0.0
    kind: str = "candidate"              # candidate | baseline | reference
    device: int | None = None            # the GPU ordinal that ran it (several-GPU runs)
    #: where the gate's time went (seconds): compile (waited for), load, runs (worker answers),
    #: worker parts summed over runs, reference, sample, checks
    cost: dict | None = None
    #: the kernel's dispatch rule ([{"when", "defines"}], default last) when it carries one; each
    #: case's ``variant`` says which line it ran with (see gate/dispatch_rule.py)
    dispatch: list | None = None

    def case(self, name: str) -> CaseResult | None:
        return next((c for c in self.cases if c.name == name), None)

    def failures(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed and c.reason != "skipped"]

    def to_json(self, with_samples: bool = True) -> dict:
        d = {"label": self.label, "passed": self.passed, "reason": self.reason,
             "message": self.message, "score_us": self.score_us, "compile": self.compile,
             "defines": self.defines, "sha256": self.sha256, "seconds": round(self.seconds, 3),
             "kind": self.kind, "device": self.device, "cases": [c.to_json(with_samples) for c in self.cases],
             "cost": self.cost}
        if self.dispatch is not None:
            d["dispatch"] = self.dispatch
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Evaluation":
        d = dict(d)
        cases = [CaseResult.from_json(c) for c in d.pop("cases", [])]
        e = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        e.cases = cases
        return e
