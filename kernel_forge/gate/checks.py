"""Every verdict the gate gives, as a small pure check function in one list.

The worker only observes (``worker_protocol.Observation``, ``ModuleFacts``, ``Failure``); these
functions judge.  :data:`PRE_CHECKS` run on the module facts before any launch of a case;
:data:`RUN_CHECKS` run, in order, on the observation of each input draw, and the first finding
is the case's verdict.  Adding a check is one function here, one entry in a list and its test.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kernel_forge.gate.throughput import fill_throughput
from kernel_forge.model.task import Case, Task
from kernel_forge.model.tolerance import OutputCheck, compare, element_checks, stored_value
from kernel_forge.model.verdict import CaseResult
from kernel_forge.model.worker_protocol import AFTER_TIMING, FIRST, REPEAT, Failure, ModuleFacts, Observation, ResolvedLaunch, SampleValues, StageObservation


@dataclass(frozen=True)
class Finding:
    reason: str                        #: a code from verdict.REASONS
    message: str
    stage: str | None = None           #: the stage whose outputs the finding is about


# -- before any launch: the module's facts -----------------------------------------------------

@dataclass
class LoadContext:
    task: Task
    device: dict                       #: DeviceInfo.to_json()
    facts: ModuleFacts | None          #: None for Python baselines
    launch: ResolvedLaunch | None      #: None when the launch expressions did not evaluate
    launch_error: str = ""             #: why they did not


def check_signature_sizes(ctx: LoadContext) -> Finding | None:
    """The compiled kernel's parameter sizes are the task signature's (8 bytes per pointer)."""
    sizes = ctx.facts.param_sizes if ctx.facts else None
    if sizes is None:
        return None
    want = [8 if a.is_buffer else a.param.dtype.itemsize for a in ctx.task.args]
    if sizes != want:
        return Finding("signature_mismatch", f"the compiled kernel's parameter sizes are {sizes} bytes; "
                                             f"the task's signature needs {want}")
    return None


def check_launch_resolves(ctx: LoadContext) -> Finding | None:
    if ctx.launch is None and ctx.launch_error:
        return Finding("launch_config", f"launch expression: {ctx.launch_error}")
    return None


def check_launch_limits(ctx: LoadContext) -> Finding | None:
    """Grid, block and shared memory within this GPU's and this kernel's limits."""
    if ctx.launch is None:
        return None
    info, facts = ctx.device, ctx.facts
    grid, block, smem = ctx.launch.grid, ctx.launch.block, ctx.launch.shared_mem
    threads = ctx.launch.threads
    problems = []
    if min(grid) < 1 or min(block) < 1:
        problems.append(f"grid {list(grid)} and block {list(block)} need every dimension >= 1")
    if threads > info["max_threads_per_block"]:
        problems.append(f"block {list(block)} has {threads} threads; this GPU allows {info['max_threads_per_block']}")
    for i, (b, mb) in enumerate(zip(block, info["max_block"])):
        if b > mb:
            problems.append(f"block dimension {'xyz'[i]} = {b} exceeds {mb}")
    for i, (g, mg) in enumerate(zip(grid, info["max_grid"])):
        if g > mg:
            problems.append(f"grid dimension {'xyz'[i]} = {g} exceeds {mg}")
    if smem < 0:
        problems.append(f"dynamic shared memory {smem} is negative")
    static = facts.static_smem if facts else 0
    if smem + static > info["max_smem_per_block_optin"]:
        problems.append(f"{smem} bytes of dynamic + {static} of static shared memory exceed this GPU's "
                        f"opt-in maximum of {info['max_smem_per_block_optin']} bytes per block")
    elif facts is not None and smem > facts.max_dynamic_smem and smem > 0:
        problems.append(f"{smem} bytes of dynamic shared memory: the kernel accepts {facts.max_dynamic_smem}"
                        + (f" ({facts.smem_error})" if facts.smem_error else ""))
    if facts is not None and facts.max_threads_per_block and threads > facts.max_threads_per_block:
        problems.append(f"block of {threads} threads exceeds this kernel's limit of {facts.max_threads_per_block} "
                        f"({facts.registers} registers per thread or __launch_bounds__)")
    return Finding("launch_config", "; ".join(problems)) if problems else None


def check_cooperative(ctx: LoadContext) -> Finding | None:
    """A cooperative launch (``// kforge: cooperative = true``) needs every block resident at once:
    at most (blocks per SM for this block size and shared memory) x (SMs) blocks."""
    launch, facts = ctx.launch, ctx.facts
    if launch is None or not getattr(launch, "cooperative", False) or facts is None:
        return None
    if not facts.cooperative:
        return Finding("launch_config", "this GPU does not support cooperative launches "
                                        "(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH is 0)")
    per_sm = facts.occupancy.get((launch.threads, launch.shared_mem))
    if per_sm is None:
        return None                    # occupancy unknown: the driver refuses a grid too large itself
    sms = int(ctx.device.get("sms") or 0)
    fits = per_sm * sms
    if launch.blocks > fits:
        limit = f"{facts.registers} registers per thread, {facts.static_smem} B static + {launch.shared_mem} B dynamic " \
                "shared memory"
        return Finding("launch_config",
                       f"cooperative launch of {launch.blocks} blocks of {launch.threads} threads: at most "
                       f"{per_sm} blocks per SM x {sms} SMs = {fits} can be resident at once ({limit}); "
                       f"use a grid of at most {fits} blocks (a grid-stride loop covers the rest)")
    return None


PRE_CHECKS: list[Callable[[LoadContext], Finding | None]] = [
    check_signature_sizes, check_launch_resolves, check_launch_limits, check_cooperative,
]


def before_launch(ctx: LoadContext) -> Finding | None:
    """The first finding of :data:`PRE_CHECKS`, or None: the case may be launched."""
    for check in PRE_CHECKS:
        found = check(ctx)
        if found:
            return found
    return None


# -- failures the worker saw -------------------------------------------------------------------

def failure_finding(f: Failure) -> Finding:
    """The reason for an error the worker observed (a crash, an OOM, a refused launch)."""
    if f.kind == "out_of_memory":
        return Finding("out_of_memory", f.message)
    if f.kind == "cuda":
        return Finding("crash" if f.sticky else "launch_failed", f.message)
    if f.kind == "no_expected":
        return Finding("reference_error", f.message)
    return Finding("harness_error", f.message)


# -- after a run: the observation --------------------------------------------------------------

@dataclass
class RunContext:
    task: Task
    draw: int                          #: 0 for the first input draw of the case
    seed: int
    expected: dict[str, np.ndarray] | None = None   #: the reference's outputs, computed in the parent
    sample_indices: dict[str, dict[str, np.ndarray]] | None = None  #: what the gate asked for
    sample: SampleValues | None = None   #: what the worker answered
    plausibility: bool = True
    plausible_margin: float = 1.25
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  #: each output's shape for this case
    calibration: dict | None = None    #: measured bandwidth and peaks (for check_plausible)
    flops: float | None = None
    bytes: float | None = None
    extra: dict = field(default_factory=dict)


def _where(ctx: RunContext, stage: str) -> str:
    return f"draw {ctx.draw + 1} (seed {ctx.seed}), {stage}"


def _differs(stage: StageObservation, first: StageObservation | None) -> list[str]:
    """Outputs whose fingerprint after ``stage`` is not the first launch's."""
    if first is None:
        return sorted(stage.fingerprints)
    return [n for n, fp in stage.fingerprints.items() if first.fingerprints.get(n) != fp]


def outputs_of(obs: Observation, stage: StageObservation) -> list[OutputCheck]:
    """A stage's comparison, or that of the earlier stage it is bit for bit."""
    seen = set()
    while stage.same_as and stage.same_as not in seen:
        seen.add(stage.stage)
        earlier = obs.stage(stage.same_as)
        if earlier is None:
            break
        stage = earlier
    return stage.outputs


def _outputs_finding(obs: Observation, stage: StageObservation, ctx: RunContext,
                     reason: str | None = None) -> Finding | None:
    bad = [c for c in outputs_of(obs, stage) if not c.ok]
    if not bad:
        return None
    c = bad[0]
    if reason is None:
        reason = "unwritten" if c.unwritten and c.unwritten == c.mismatches else "mismatch"
    return Finding(reason, f"{_where(ctx, stage.stage)}: {c.summary()}", stage.stage)


def check_inputs_unchanged(obs: Observation, ctx: RunContext) -> Finding | None:
    """Const inputs hold, after every stage, the bytes they were uploaded with."""
    for stage, fps in obs.inputs_after.items():
        changed = [n for n, fp in fps.items() if obs.input_fingerprints.get(n) != fp]
        if changed:
            return Finding("input_modified", f"const input(s) {', '.join(changed)} changed by the kernel "
                                             f"(seen after the {stage})")
    return None


def check_expected_intact(obs: Observation, ctx: RunContext) -> Finding | None:
    """The expected outputs the worker keeps on the GPU are what was uploaded."""
    for name, (before, after) in obs.expected_fingerprints.items():
        if before != after:
            return Finding("tampered", f"the expected values of output {name} kept on the GPU changed during "
                                       "the run (a write outside the kernel's own buffers)")
    for name, (before, after) in obs.initial_fingerprints.items():
        if before != after:
            return Finding("tampered", f"the initial values of {name} kept on the GPU changed during the run "
                                       "(a write outside the kernel's own buffers)")
    for name, (before, after) in obs.free_room_fingerprints.items():
        if before != after:
            return Finding("tampered", f"the unused bytes of the case's memory block ({name}, past or between its "
                                       "buffers) were written during the run: a write outside the kernel's own "
                                       "buffers, where state could outlive the launch")
    return None


def check_constants_intact(obs: Observation, ctx: RunContext) -> Finding | None:
    """``__constant__`` memory is read-only to kernels: its bytes are what the module was loaded with."""
    for stage, names in obs.constants_changed.items():
        if names:
            return Finding("tampered", f"__constant__ variable(s) {', '.join(names)} changed during the run (seen "
                                       f"after the {stage}): a store to constant memory through a pointer")
    if obs.state_image_changed:
        return Finding("tampered", "the copy of the module's initial globals that the gate restores them from was "
                                   "written to during the run (a write outside the kernel's own buffers)")
    return None


def check_sample(obs: Observation, ctx: RunContext) -> Finding | None:
    """The elements the gate sampled after the run agree with the GPU comparison's summary."""
    kept = [s for s in obs.stages if s.kept]
    if not kept:
        return None
    if ctx.sample is None or ctx.sample_indices is None or ctx.expected is None:
        return Finding("harness_error", "the outputs were compared on the GPU but no sample was checked")
    for stage in kept:
        asked = ctx.sample_indices.get(stage.stage, {})
        got = ctx.sample.values.get(stage.stage, {})
        for chk in stage.outputs:
            idx = asked.get(chk.name)
            if idx is None:
                continue
            values = got.get(chk.name)
            if values is None or len(values) != len(idx):
                return Finding("tampered", f"{stage.stage}: the worker sent no sample of output {chk.name}")
            arg = ctx.task.arg(chk.name)
            expected = np.asarray(ctx.expected[chk.name]).reshape(-1)[idx]
            el = element_checks(values, expected, arg.param.dtype, ctx.task.tolerance_for(arg))
            claimed = _claimed_bad(chk, ctx.shapes.get(chk.name, np.shape(ctx.expected[chk.name])))
            for j, i in enumerate(np.asarray(idx).tolist()):
                if i in claimed:
                    if not el.bad[j] or not _same_value(values[j], claimed[i], arg.param.dtype):
                        return Finding("tampered", f"{_where(ctx, stage.stage)}: the GPU comparison reported "
                                                   f"element {i} of {chk.name} as {claimed[i]!r}, but it holds a "
                                                   "different or a correct value")
                elif el.bad[j] and chk.mismatches == 0:
                    return Finding("tampered", f"{_where(ctx, stage.stage)}: the GPU comparison found no "
                                               f"mismatch in {chk.name}, but sampled element {i} is wrong")
    return None


def _claimed_bad(chk: OutputCheck, shape) -> dict[int, object]:
    out = {}
    for f in chk.first:
        if len(f["index"]) == len(shape):
            out[int(np.ravel_multi_index(tuple(f["index"]), shape))] = f["actual"]
    return out


def _same_value(stored, claimed, dtype) -> bool:
    got = stored_value(np.asarray([stored]), dtype)
    return got == claimed or (isinstance(got, str) and got == str(claimed))


def check_first_launch(obs: Observation, ctx: RunContext) -> Finding | None:
    """The first checked launch's outputs match the reference (all written)."""
    first = obs.stage(FIRST)
    return _outputs_finding(obs, first, ctx) if first else None


def check_repeat_identical(obs: Observation, ctx: RunContext) -> Finding | None:
    """A second launch on the same inputs gives the same bits (or, for tasks declared
    nondeterministic, outputs that pass too)."""
    repeat, first = obs.stage(REPEAT), obs.stage(FIRST)
    if repeat is None:
        return None
    differing = _differs(repeat, first)
    if not differing:
        return None
    if ctx.task.nondeterministic:
        return _outputs_finding(obs, repeat, ctx)
    return Finding("nondeterministic",
                   f"outputs {', '.join(differing)} differ bit-for-bit between two launches on the same inputs "
                   f"(seed {ctx.seed}): a race or uninitialised read; declare \"nondeterministic\": true in the "
                   "manifest only for float atomics", REPEAT)


def check_after_timing(obs: Observation, ctx: RunContext) -> Finding | None:
    """The outputs the last timed launch left are right (unless they are the first launch's bits)."""
    after = obs.stage(AFTER_TIMING)
    if after is None or not _differs(after, obs.stage(FIRST)):
        return None
    return _outputs_finding(obs, after, ctx, "stale_after_timing")


def _mid(obs: Observation) -> StageObservation | None:
    return next((s for s in obs.stages if s.stage.startswith("after timed launch")), None)


def check_kept_copy(obs: Observation, ctx: RunContext) -> Finding | None:
    """The copies the worker kept of a stage's outputs were not changed by the later launches (a
    timed launch's copy only matters where it is not the first launch's bits)."""
    first = obs.stage(FIRST)
    for stage in obs.stages:
        if stage.later_fingerprints is None:
            continue
        mid = stage.stage.startswith("after timed launch")
        names = _differs(stage, first) if mid else sorted(stage.fingerprints)
        for name in names:
            if stage.later_fingerprints.get(name) != stage.fingerprints[name]:
                where = stage.stage if mid else f"after the {stage.stage}"
                return Finding("stale_after_timing", f"the copy of output {name} kept {where} was overwritten "
                                                     "by a later launch (a write outside the kernel's own buffers)",
                               stage.stage)
    return None


def check_mid_timing(obs: Observation, ctx: RunContext) -> Finding | None:
    """The outputs of one randomly chosen timed launch are right."""
    mid = _mid(obs)
    if mid is None or not _differs(mid, obs.stage(FIRST)):
        return None
    return _outputs_finding(obs, mid, ctx, "stale_after_timing")


def check_plausible(obs: Observation, ctx: RunContext) -> Finding | None:
    """The median is not faster than the measured copy bandwidth or the tensor-core peak allow."""
    cal = ctx.calibration
    if not ctx.plausibility or obs.timing is None or not cal:
        return None
    median = obs.timing.median
    secs = median * 1e-6
    limits = []
    if ctx.bytes and cal.get("bandwidth"):
        limits.append(("bytes", ctx.bytes / (cal["bandwidth"] * ctx.plausible_margin)))
    if ctx.flops and cal.get("tensor_peak"):
        limits.append(("flops", ctx.flops / (cal["tensor_peak"] * 1.05)))
    for what, floor in limits:
        if secs < floor:
            if what == "bytes":
                return Finding("implausible",
                               f"median {median:.2f} µs moves {ctx.bytes:.3g} bytes at {ctx.bytes / secs / 1e9:.0f} "
                               f"GB/s, above the measured copy bandwidth {cal['bandwidth'] / 1e9:.0f} GB/s "
                               f"x{ctx.plausible_margin}: it cannot have read its inputs")
            return Finding("implausible",
                           f"median {median:.2f} µs does {ctx.flops:.3g} FLOP at {ctx.flops / secs / 1e12:.1f} "
                           f"TFLOP/s, above this GPU's tensor-core peak {cal['tensor_peak'] / 1e12:.0f} TFLOP/s")
    return None


RUN_CHECKS: list[Callable[[Observation, RunContext], Finding | None]] = [
    check_inputs_unchanged, check_expected_intact, check_constants_intact, check_sample, check_first_launch, check_repeat_identical,
    check_after_timing, check_kept_copy, check_mid_timing, check_plausible,
]


def judge(obs: Observation, ctx: RunContext) -> Finding | None:
    """The first finding of :data:`RUN_CHECKS`, or None: this draw passed."""
    for check in RUN_CHECKS:
        found = check(obs, ctx)
        if found:
            return found
    return None


def judge_draw(task: Task, case: Case, obs: Observation, ctx: RunContext, res: CaseResult,
                 calibrate: Callable[[], dict]) -> Finding | None:
    """The verdict of one input draw (:func:`judge`; None: it passed), after the CPU comparison
    where the worker sent values back; ``res`` gets the outputs shown and, for a time that counts,
    the timing and its rates.  ``calibrate`` is asked only where a rate or the plausibility check
    needs the device's peaks."""
    for stage in obs.stages:               # the CPU fallback: the worker sent the values
        if stage.arrays is not None and not stage.outputs and not stage.same_as:
            stage.outputs = [compare(a.name, stage.arrays[a.name], ctx.expected[a.name], a.param.dtype,
                                     task.tolerance_for(a)) for a in task.outputs]
    if obs.timing is not None:
        ctx.flops, ctx.bytes = task.cost(case)
        if ctx.plausibility:
            ctx.calibration = calibrate()
    finding = judge(obs, ctx)
    shown = obs.stage(finding.stage) if finding and finding.stage else obs.stage(FIRST)
    if shown is not None:
        res.outputs = [c.to_json() for c in outputs_of(obs, shown)]
    if obs.timing is not None and (finding is None or finding.reason == "implausible"):
        res.timing = obs.timing
        fill_throughput(task, case, res, calibrate)
    return finding
