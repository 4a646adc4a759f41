"""The worker ↔ gate protocol: every message between the gate and its GPU worker, in one place.

The worker observes; the gate judges.  The worker (``gpu/runner.py``) loads modules, launches,
times, fingerprints and compares on the GPU, and answers with the typed facts below; it never
decides a verdict.  The gate (``gate.py``) decides every verdict with the check functions of
``checks.py`` over these facts.

Messages are ``(kind, payload)`` tuples on a ``multiprocessing`` pipe, payloads are the
dataclasses of this module (pickled).  Per candidate and case::

    gate                                   worker
    ("load", Load)                  ──►    load the CUBIN (cached), snapshot its globals, opt in to
                                           the dynamic shared memory asked for, query occupancy
                                    ◄──    ("ok", ModuleFacts)
      checks on the facts (launch limits, parameter sizes): a failing case is never launched
    ("run", Run)                    ──►    inputs of (case, seed) drawn and uploaded once, kept
                                           resident; checked launch, repeat launch, timed launches,
                                           each from the module's initial globals
                                    ◄──    ("progress", Progress)  (the first checked launch starts /
                                           ended: the gate's timeouts follow)
                                    ◄──    ("need", Need)  only if the expected outputs of
                                           (case, seed) are not resident
    ("expected", Expected)          ──►    uploaded once, fingerprinted with a key drawn now
                                           outputs of every distinct stage compared on the GPU
                                    ◄──    ("ok", Observation)  or  ("error", Failure)
    ("sample", Sample)              ──►    indices the gate chose after it had the observation
                                    ◄──    ("ok", SampleValues)  the stored values there; the
                                           stage outputs kept for it are released

Also ``("calibrate", None)`` → ``("ok", dict)`` and ``("exit", None)``.  The worker starts by
sending ``("ready", Ready)`` or ``("fatal", dict)``.  A sticky CUDA error ends the worker right
after its ``("error", Failure)``; a hang is seen by the gate as no answer.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from kernel_forge.config.gate_settings import TimingOptions
from kernel_forge.model.candidate import Launch
from kernel_forge.common.stats import Timing
from kernel_forge.model.tolerance import OutputCheck

# message kinds, gate -> worker
LOAD, RUN, EXPECTED, SAMPLE, CALIBRATE, EXIT = "load", "run", "expected", "sample", "calibrate", "exit"
# message kinds, worker -> gate
READY, FATAL, OK, PROGRESS, NEED, ERROR = "ready", "fatal", "ok", "progress", "need", "error"

#: stage names, in the order a run produces them
FIRST, REPEAT, AFTER_TIMING = "first launch", "second launch", "after timing"


def mid_timing(i: int) -> str:
    """The stage name of the outputs kept right after timed launch ``i``."""
    return f"after timed launch {i}"


@dataclass
class KernelSpec:
    """What to run: a compiled kernel (cubin) or a Python baseline callable."""

    kind: str                          #: "cuda" or "python"
    label: str                         #: for messages
    cubin: bytes | None = None         #: the compiled kernel (kind "cuda")
    entry: str = ""                    #: its entry point
    launch: Launch | None = None       #: launch expressions (resolved by the gate per case)
    defines: dict = field(default_factory=dict)  #: tunables the kernel was compiled with
    module_path: str = ""              #: python baselines: the file
    function: str = ""                 #: python baselines: the callable's name

    @property
    def key(self) -> str:
        h = hashlib.sha256()
        h.update(self.kind.encode() + self.label.encode() + self.entry.encode())
        h.update(self.cubin or self.module_path.encode() + self.function.encode())
        return h.hexdigest()


@dataclass(frozen=True)
class ResolvedLaunch:
    """A launch evaluated for one case: grid and block padded to three dimensions."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int = 0
    cooperative: bool = False          #: launched with cuLaunchCooperativeKernel (grid-wide sync)

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def to_json(self) -> dict:
        d = {"grid": list(self.grid), "block": list(self.block), "shared_mem": self.shared_mem}
        if self.cooperative:
            d["cooperative"] = True
        return d


def resolve_launch(launch: Launch, case_vars: dict, defines: dict) -> ResolvedLaunch:
    """Evaluate ``launch`` for a case (raises ExpressionError & co. when it does not evaluate)."""
    variables = dict(case_vars)
    variables.update(defines)
    grid, block, smem = launch.resolve(variables)
    return ResolvedLaunch(tuple(grid), tuple(block), int(smem), bool(getattr(launch, "cooperative", False)))


# -- load --------------------------------------------------------------------------------------

@dataclass
class Load:
    spec: KernelSpec
    launches: list[ResolvedLaunch]     #: every launch the gate may ask for: occupancy is queried for each


@dataclass
class ModuleFacts:
    """What the loaded kernel is, as the driver reports it (the gate checks launches against it)."""

    registers: int = 0                 #: CU_FUNC_ATTRIBUTE_NUM_REGS
    static_smem: int = 0               #: CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
    local_bytes: int = 0               #: CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES (per thread)
    const_bytes: int = 0               #: CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES
    max_threads_per_block: int = 0     #: CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK (registers, __launch_bounds__)
    param_sizes: list[int] | None = None  #: cuFuncGetParamInfo, None where the driver lacks it
    max_dynamic_smem: int = 0          #: dynamic shared memory the function now accepts
    smem_error: str = ""               #: why opting in to more dynamic shared memory failed
    #: (threads per block, dynamic shared memory) -> cuOccupancyMaxActiveBlocksPerMultiprocessor
    occupancy: dict[tuple[int, int], int] = field(default_factory=dict)
    globals: dict[str, int] = field(default_factory=dict)  #: module globals (name -> bytes), restored before every launch
    sm: dict[str, int] = field(default_factory=dict)  #: per-SM limits: max_threads, max_blocks, registers, shared_memory, reserved_smem
    cooperative: bool = True           #: the device supports cooperative launches (CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)
    seconds: float = 0.0               #: load and queries


# -- run ---------------------------------------------------------------------------------------

@dataclass
class RunPlan:
    """What one run does.  Everything random the worker uses is chosen here by the gate."""

    case: str
    seed: int
    launch: ResolvedLaunch | None = None   #: None for Python baselines
    check: bool = True                 #: a checked launch first (pure outputs poisoned)
    repeat: bool = True                #: a second checked launch on the same inputs
    time: bool = False                 #: timed launches after the checks
    timing: TimingOptions = field(default_factory=TimingOptions)  #: how the timed launches are made: the gate's options, whole
    extra_warmup: int = 0              #: added to the warm-up count (so launches cannot be counted)
    after_timing: bool = True          #: also keep one chosen timed launch's outputs for the checks (the last timed launch's are checked in every mode; outputs are poisoned before every timed launch either way)
    snap_fraction: float = 0.5         #: which timed launch's outputs are kept: int(fraction * reps)
    compare: str = "gpu"               #: "gpu": compare on the GPU; "cpu": send the stage outputs instead; "none"
    keep: bool = True                  #: keep the stage outputs on the GPU for a Sample request


@dataclass
class Run:
    spec: KernelSpec
    plan: RunPlan


@dataclass
class Progress:
    stage: str                         #: "launch" (the first checked launch starts) or "launched"
    first_launch_s: float = 0.0        #: wall time of the first checked launch, once it ended


@dataclass
class Need:
    """The worker asks for the expected outputs of (case, seed): they are not resident."""

    case: str
    seed: int


@dataclass
class Expected:
    case: str
    seed: int
    outputs: dict[str, np.ndarray] | None  #: reference values per output; None: there are none (the reference failed)


@dataclass
class StageObservation:
    """The outputs after one stage of a run."""

    stage: str                         #: FIRST, REPEAT, AFTER_TIMING or mid_timing(i)
    fingerprints: dict[str, int]       #: keyed fingerprint of each output (key drawn for this run)
    same_as: str | None = None         #: an earlier stage whose outputs are these bit for bit (not compared again)
    outputs: list[OutputCheck] = field(default_factory=list)  #: comparison with the expected outputs
    kept: bool = False                 #: the values are kept on the GPU for the Sample request
    arrays: dict[str, np.ndarray] | None = None  #: the stored values (compare "cpu" and references)
    later_fingerprints: dict[str, int] | None = None  #: a kept copy's fingerprints after every later launch


@dataclass
class Observation:
    """What the worker saw in one run.  Facts only: the gate's checks decide."""

    case: str
    seed: int
    stages: list[StageObservation] = field(default_factory=list)
    first_launch_s: float = 0.0        #: GPU time of the first checked launch (events): the timing estimate
    #: const inputs: fingerprint when uploaded, and after each stage
    input_fingerprints: dict[str, int] = field(default_factory=dict)
    inputs_after: dict[str, dict[str, int]] = field(default_factory=dict)  #: stage -> input -> fingerprint
    #: expected outputs on the GPU: (fingerprint at upload, fingerprint after this run)
    expected_fingerprints: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: initial values of in/out buffers on the GPU: (fingerprint at upload, after this run)
    initial_fingerprints: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: the bytes of the case's block that no buffer uses (zeroed at upload): (fingerprint then, after this run)
    free_room_fingerprints: dict[str, tuple[int, int]] = field(default_factory=dict)
    globals_changed: dict[str, list[str]] = field(default_factory=dict)  #: stage -> module globals the launch changed
    constants_changed: dict[str, list[str]] = field(default_factory=dict)  #: stage -> __constant__ variables whose bytes changed
    state_image_changed: bool = False  #: the load-time image the globals are restored from was written to
    timing: Timing | None = None
    warmup: int = 0                    #: untimed launches actually made
    reps: int = 0                      #: timed launches actually made
    snap_at: int | None = None         #: the timed launch whose outputs were kept
    resident: bool = False             #: the inputs were already on the GPU (drawn by an earlier run)
    restored: list[str] = field(default_factory=list)  #: resident buffers found changed at the start and uploaded again
    seconds: dict[str, float] = field(default_factory=dict)  #: worker time by part (upload, launches, timing, compare, fingerprints)

    def stage(self, name: str) -> StageObservation | None:
        return next((s for s in self.stages if s.stage == name), None)


@dataclass
class Failure:
    """An error the worker saw.  The gate maps it to a reason (checks.failure_reason)."""

    kind: str                          #: "cuda" | "out_of_memory" | "harness" (kernel_forge's own machinery) | "no_expected"
    message: str
    code: str = ""                     #: CUDA error name, when there is one
    sticky: bool = False               #: the context is unusable; the worker exits after answering
    stage: str = ""                    #: where: "load", "upload", FIRST, REPEAT, "timing", "compare", ...


@dataclass
class Sample:
    indices: dict[str, dict[str, np.ndarray]]  #: stage -> output -> flat element indices


@dataclass
class SampleValues:
    values: dict[str, dict[str, np.ndarray]]   #: stage -> output -> stored values at those indices


@dataclass
class Ready:
    device: dict                       #: DeviceInfo.to_json()
    pid: int
    clock: str | None = None           #: "cupti" when the kernel clock is on, else why it is off
    resident_bytes: int = 0            #: GPU memory the worker keeps inputs and expected outputs in
    clock_offset: dict | None = None   #: the kernel clock's launch offset: value, source, measurement (kernel_clock)
    flush: str = ""                    #: the L2 flush before timed launches: "once" (one cooperative kernel) or "split (why)" (gpu/flush.py)


def timing_counts(estimate_s: float, overhead_s: float, plan: RunPlan) -> tuple[int, int]:
    """``(warmup, reps)`` for a case whose launch takes about ``estimate_s`` of GPU time plus
    ``overhead_s`` (flush, resets) per timed launch: as many as the budgets allow, within
    ``[min, max]``; ``plan.timing.reps`` and ``plan.timing.warmup`` are the maxima."""
    t = plan.timing
    per = max(float(estimate_s), 0.0) + max(float(overhead_s), 0.0)
    per = max(per, 1e-6)
    reps = int(t.timing_budget_s / per)
    warm = int(t.warmup_budget_s / per)
    reps = max(min(t.reps, max(reps, t.min_reps)), 1)
    warmup = max(min(t.warmup, max(warm, t.min_warmup)), 0)
    return warmup, reps


def first_batch(reps: int, plan: RunPlan) -> int:
    """How many timed launches always run (``timing.bench`` may stop after them)."""
    return reps if plan.timing.max_noise <= 0 else max(1, min(reps, plan.timing.min_reps))
