"""The gate's worker: loads, launches, times and compares on the GPU, and reports what it saw.

:func:`worker_main` is the worker's entry point: it turns the CUPTI kernel clock on before any
CUDA context exists, owns the context (through CuPy), and answers the requests of
:mod:`kernel_forge.model.worker_protocol` over a pipe.  It never decides a verdict: every answer is an
observation (``ModuleFacts``, ``Observation``, ``Failure``) that the gate's checks judge.  A
sticky CUDA error ends the worker after its answer; the parent starts a fresh one.
"""
from __future__ import annotations

import functools
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kernel_forge.common.dtypes import from_float
from kernel_forge.common.errors import CudaError
from kernel_forge.model.inputs import generate
from kernel_forge.model.task import Task
from kernel_forge.model.tolerance import OutputCheck, device_expected
from kernel_forge.model.worker_protocol import AFTER_TIMING, CALIBRATE, ERROR, EXIT, EXPECTED, FATAL, FIRST, LOAD, NEED, OK, PROGRESS, READY, REPEAT, RUN, SAMPLE, Expected, Failure, KernelSpec, Load, ModuleFacts, Need, Observation, Progress, Ready, Run, RunPlan, Sample, SampleValues, StageObservation, first_batch, mid_timing, timing_counts
from kernel_forge.gpu import driver, kernel_clock, mask
from kernel_forge.gpu.fingerprint import fingerprint_many, new_key
from kernel_forge.gpu.flush import L2Flusher
from kernel_forge.gpu.module_state import HarnessFault, ModuleState
from kernel_forge.gpu.resident import Block, CaseBuffers, Resident, case_layout, free_room, memset, reset
from kernel_forge.gpu.timing import bench
from kernel_forge.gpu.scrubbed_pool import ScrubbedPool

__all__ = ["CaseRunner", "KernelSpec", "classify", "worker_main"]

#: test hook: the GPU comparison reports every output as matching (the sample check must catch it)
FORGE_ENV = "KFORGE_TEST_FORGE_COMPARE"


class CaseFailure(Exception):
    """An error seen by the worker, carried as the :class:`Failure` it is reported as."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


#: driver calls whose failure is the candidate's (its module, its launch, its kernel's execution);
#: a non-sticky error of any other call is the harness's own (``harness_error``)
CANDIDATE_CALLS = ("cuLaunchKernel", "cuLaunchCooperativeKernel", "cuModuleLoadData", "cuModuleGetFunction",
                   "kernel execution", "timed launches", "cuFuncSetAttribute")


def classify(exc: BaseException, stage: str = "") -> Failure:
    """What went wrong, as the worker saw it: a CUDA error of the candidate's (and whether it is
    sticky), an OOM, or a fault of the harness's own machinery (a failed snapshot, memset, copy or
    comparison: never blamed on the candidate).  A sticky error is always the candidate's: the
    harness's calls only see it because the candidate's kernel faulted earlier."""
    if isinstance(exc, CaseFailure):
        return exc.failure
    if isinstance(exc, HarnessFault):
        exc_c = exc.cause
        code = getattr(exc_c, "code", "")
        return Failure("harness", f"kernel_forge's own {exc.what} failed ({code or type(exc_c).__name__}); "
                                  "this is not the kernel's fault", code=code, stage=stage)
    text = f"{type(exc).__name__}: {exc}"
    code = exc.code if isinstance(exc, CudaError) else ""
    if not code:
        for token in str(exc).replace(":", " ").split():
            if token.startswith(("CUDA_ERROR_", "cudaError")):
                code = token
                break
    norm = code.upper().replace("CUDAERROR", "CUDA_ERROR_")
    if "OutOfMemory" in type(exc).__name__ or "OUT_OF_MEMORY" in norm or "MEMORYALLOCATION" in norm:
        return Failure("out_of_memory", text, code=code or "CUDA_ERROR_OUT_OF_MEMORY", stage=stage)
    sticky_names = {n.replace("CUDA_ERROR_", "").replace("_", "") for n in driver.STICKY}
    flat = norm.replace("CUDA_ERROR_", "").replace("_", "")
    if code and flat in sticky_names or "illegal" in text.lower():
        return Failure("cuda", text, code=code, sticky=True, stage=stage)
    if isinstance(exc, CudaError) and exc.call.startswith(CANDIDATE_CALLS):
        return Failure("cuda", text, code=code, stage=stage)
    if code:
        return Failure("harness", f"kernel_forge's own GPU call failed: {text}; this is not the kernel's fault",
                       code=code, stage=stage)
    return Failure("harness", text + "\n" + traceback.format_exc(limit=-4), stage=stage)


def _sm_limits(ordinal: int) -> dict[str, int]:
    drv = driver._driver()
    dev = driver.check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    A = drv.CUdevice_attribute
    names = {"max_threads": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR",
             "max_blocks": "CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR",
             "registers": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR",
             "shared_memory": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
             "reserved_smem": "CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK"}
    out = {}
    for key, name in names.items():
        attr = getattr(A, name, None)
        if attr is not None:
            status, value = drv.cuDeviceGetAttribute(attr, dev)
            if status == drv.CUresult.CUDA_SUCCESS:
                out[key] = int(value)
    return out


def scalar_arg(param, value):
    """A scalar kernel argument as (value, ctypes type); half and bf16 as their bits."""
    dt = param.dtype
    if dt.name == "float16":
        return int(np.float16(value).view(np.uint16)), dt.ctype
    if dt.name == "bfloat16":
        return int(from_float(np.array([value], np.float32), dt)[0]), dt.ctype
    return value, dt.ctype


class _Loaded:
    """A loaded CUBIN, its initial globals and how much dynamic shared memory it accepts.

    :meth:`initial_state` runs before every launch: it copies the load-time image back over the
    module's globals, or, where some global could not be found on the device, loads the module
    afresh (slower, the same guarantee)."""

    def __init__(self, spec: KernelSpec):
        self.spec = spec
        self.module = driver.Module(spec.cubin, spec.entry)
        try:
            self.state = ModuleState(self.module, spec.cubin)
        except BaseException:
            self.module.unload()
            raise
        self.max_dynamic = self.module.attribute("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")
        self.smem_error = ""

    @property
    def globals(self) -> dict[str, int]:
        return {g.name: g.size for g in self.state.globals if not g.constant}

    def initial_state(self, stream) -> None:
        if self.state.complete:
            self.state.restore(stream)
            return
        stream.synchronize()
        wanted = self.max_dynamic
        self.module.unload()
        self.module = driver.Module(self.spec.cubin, self.spec.entry)
        self.state = ModuleState(self.module, self.spec.cubin)
        if wanted > self.module.attribute("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"):
            self.module.set_max_dynamic_smem(wanted)

    def wipe(self, stream) -> None:
        """After a run: the globals back to their load-time image (a cache filled with an answer is
        not left for a later candidate to find; invariant 11).  A module that reloads before every
        launch is left as it is (its next launch reloads it anyway)."""
        if self.state.complete:
            self.state.restore(stream)

    def allow_dynamic(self, nbytes: int, optin_total: int) -> None:
        """Opt in to ``nbytes`` of dynamic shared memory where the GPU allows it."""
        static = self.module.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        if nbytes <= self.max_dynamic or nbytes + static > optin_total:
            return
        try:
            self.module.set_max_dynamic_smem(nbytes)
            self.max_dynamic = nbytes
        except CudaError as exc:
            self.smem_error = str(exc)


class _Laps:
    """Wall seconds of one run by named part (``Observation.seconds``): each :meth:`lap` adds the
    time since the one before to its part."""

    def __init__(self):
        self.secs: dict[str, float] = {}
        self.tick = time.perf_counter()

    def lap(self, part: str) -> None:
        now = time.perf_counter()
        self.secs[part] = self.secs.get(part, 0.0) + now - self.tick
        self.tick = now


@dataclass(eq=False)
class _KernelLaunch:
    """One launch of a loaded CUDA kernel on the run's stream.  The module is read at every call:
    a module that reloads before each launch (:meth:`_Loaded.initial_state`) is a new one each time."""

    loaded: _Loaded
    config: object               #: the resolved launch: grid, block, shared_mem
    stream_ptr: int
    packed: object               #: driver.PackedArgs: the argument values, kept alive with it
    cooperative: bool

    def __call__(self) -> None:
        driver.launch(self.loaded.module, self.config.grid, self.config.block, self.config.shared_mem,
                      self.stream_ptr, self.packed, cooperative=self.cooperative)


@dataclass(eq=False)
class _PythonLaunch:
    """One call of a Python baseline on the run's stream; its CuPy temporaries go to ``pool``
    (wiped after the run)."""

    fn: Callable
    kwargs: dict
    stream: object
    pool: ScrubbedPool

    def __call__(self) -> None:
        with self.stream, self.pool.active():
            self.fn(**self.kwargs)


@dataclass
class _Snapshot:
    """The outputs of the one timed launch whose values are kept for the checks after timing:
    copies (masked with the run's key) and their fingerprints, taken as it ends."""

    arrays: dict[str, object] = field(default_factory=dict)
    fingerprints: dict[str, int] = field(default_factory=dict)


@dataclass(eq=False)
class _CaseRun:
    """What the stages of one :meth:`CaseRunner.run` share."""

    spec: KernelSpec
    plan: RunPlan
    obs: Observation                         #: what the run reports (its ``seconds`` are ``laps.secs``)
    bufs: CaseBuffers                        #: (case, seed)'s buffers on the GPU
    laps: _Laps
    progress: Callable[[Progress], None]
    need: Callable[[Need], Expected] | None  #: asks the parent for the expected outputs
    outputs: list[str]                       #: the task's outputs, in order
    out_arrays: dict[str, object]            #: output -> the work buffer the launches write
    run_key: int                             #: drawn for every run; only the fingerprint kernel is ever given it
    mask_key: int | None                     #: the kept copies of this run's outputs are masked with it (None: off)
    launch: Callable[[], None] | None = None   #: one launch of the kernel or baseline
    loaded: _Loaded | None = None            #: the kernel's module (None: a Python baseline)
    estimate: float | None = None            #: GPU seconds of the first checked launch
    #: the stages so far, each with the arrays holding its values
    stages: list[tuple[StageObservation, dict]] = field(default_factory=list)
    masked: set[str] = field(default_factory=set)   #: stages whose arrays are masked copies

    def lap(self, part: str) -> None:
        self.laps.lap(part)


class CaseRunner:
    """The device side of a worker: context, stream, loaded modules, resident buffers.

    Invariant 11 (:mod:`.mask`): between two runs nothing on the GPU holds a correct answer in
    plain form: expected values are stored masked, kept stage copies are written masked, and at
    the end of every run the outputs are masked in place and the module's globals wiped."""

    def __init__(self, task: Task, ordinal: int = 0, resident_bytes: int = 0, *, separate_buffers: bool = False):
        import cupy

        self.cupy = cupy
        self.task = task
        driver.probe()
        cupy.cuda.Device(ordinal).use()
        cupy.zeros(1)  # makes CuPy's primary context current for the driver calls
        self.info = driver.device_info(ordinal)
        self.sm = _sm_limits(ordinal)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.modules: dict[str, _Loaded] = {}
        self._flusher: L2Flusher | None = None
        if not resident_bytes:
            free, _total = cupy.cuda.runtime.memGetInfo()
            resident_bytes = int(min(16 << 30, free // 4))
        self.resident = Resident(resident_bytes)
        self.separate_buffers = separate_buffers   #: every buffer its own allocation (compute-sanitizer)
        self._kept: dict[str, dict[str, object]] = {}
        self._kept_key: int | None = None       #: the key the kept stage outputs are masked with
        self._scrubbed: ScrubbedPool | None = None   #: a Python baseline's CuPy temporaries
        self._dead = False
        self._current: CaseBuffers | None = None
        self.clock = kernel_clock.clock()
        self.clock_offset: dict | None = None
        self.flusher()                    # made now: the offset measurement and every timed launch use it
        if self.clock is not None:
            self.clock_offset = self.clock.for_device(self.info, self.stream,
                                                      flush=lambda stream: self.flusher()(stream))
            self.clock.pause()            # records only while timed launches run (timing.bench)

    # -- helpers ------------------------------------------------------------------------
    def flusher(self) -> L2Flusher:
        if self._flusher is None:
            self._flusher = L2Flusher(self.info.l2_bytes or (64 << 20), self.info.sms or 132, arch=self.info.arch)
        return self._flusher

    @property
    def flush_kind(self) -> str:
        """Which L2 flush the timed launches get: "once" (one cooperative kernel) or "split (why)"."""
        f = self.flusher()
        kind = getattr(f, "kind", "split")
        return kind if kind == "once" else f"{kind} ({getattr(f, 'why_split', '')})"

    def loaded(self, spec: KernelSpec) -> _Loaded:
        mod = self.modules.get(spec.key)
        if mod is None:
            if len(self.modules) > 32:
                for m in self.modules.values():
                    m.wipe(self.stream)
                self.stream.synchronize()
                for m in self.modules.values():
                    m.module.unload()
                self.modules.clear()
            mod = _Loaded(spec)
            self.modules[spec.key] = mod
        return mod

    def _fps(self, arrays: dict[str, object], key: int, masked_with: int | None = None) -> dict[str, int]:
        names = list(arrays)
        return dict(zip(names, fingerprint_many([arrays[n] for n in names], key, self.stream,
                                                masked_with=masked_with)))

    # -- load -----------------------------------------------------------------------------
    def load(self, req: Load) -> ModuleFacts:
        t0 = time.perf_counter()
        mod = self.loaded(req.spec)
        m = mod.module
        optin = self.info.max_smem_per_block_optin
        wanted = [l.shared_mem for l in req.launches if l.shared_mem > 0]
        if wanted:
            fitting = [s for s in wanted if s + m.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES") <= optin]
            if fitting:
                mod.allow_dynamic(max(fitting), optin)
        drv = driver._driver()
        occupancy = {}
        for launch in req.launches:
            key = (launch.threads, launch.shared_mem)
            if key in occupancy or launch.shared_mem > mod.max_dynamic or launch.threads < 1:
                continue
            status, blocks = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(m.function, launch.threads,
                                                                             launch.shared_mem)
            if status == drv.CUresult.CUDA_SUCCESS:
                occupancy[key] = int(blocks)
        return ModuleFacts(
            registers=m.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
            static_smem=m.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
            local_bytes=m.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
            const_bytes=m.attribute("CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES"),
            max_threads_per_block=m.attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            param_sizes=m.param_sizes(), max_dynamic_smem=mod.max_dynamic, smem_error=mod.smem_error,
            occupancy=occupancy, globals=mod.globals, sm=dict(self.sm),
            cooperative=bool(self.info.cooperative_launch), seconds=time.perf_counter() - t0)

    # -- buffers of (case, seed) ----------------------------------------------------------
    def _upload(self, case, seed: int) -> CaseBuffers:
        """Draw (case, seed)'s inputs and put them in a block of their own, laid out as
        :mod:`.resident` says (the same offsets in every mode and worker)."""
        host = generate(self.task, case, seed)
        bufs = CaseBuffers(case=case.name, seed=seed, key=new_key(), scalars=dict(host.scalars))
        shapes = {a.name: tuple(host.buffers[a.name].shape) for a in self.task.outputs}
        slots, size = case_layout(self.task, host.buffers, shapes)
        bufs.slots = {(s.kind, s.name): s for s in slots}
        try:
            block = Block(size, separate=self.separate_buffers)
        except Exception as exc:  # noqa: BLE001 - out of memory: the other cases' blocks go first
            if classify(exc).kind != "out_of_memory" or not self.resident.entries:
                raise
            self.resident.clear()
            block = Block(size, separate=self.separate_buffers)
        bufs.block = block
        with self.stream:
            for arg in self.task.args:
                if not arg.is_buffer:
                    continue
                values = np.ascontiguousarray(host.buffers[arg.name])
                dev = block.array(bufs.slots[("kernel", arg.name)].offset, values.shape, values.dtype)
                if arg.init is None:            # a pure output: poisoned before every launch anyway
                    bufs.work[arg.name] = dev
                elif arg.param.const:
                    dev.set(values, stream=self.stream)
                    bufs.const[arg.name] = dev
                else:
                    init = block.array(bufs.slots[("initial", arg.name)].offset, values.shape, values.dtype)
                    init.set(values, stream=self.stream)
                    bufs.initial[arg.name] = init
                    bufs.work[arg.name] = dev
            if not block.separate:       # the bytes no buffer uses: zeroed, and watched like the inputs
                for offset, nbytes in free_room(slots, block.size):
                    room = block.array(offset, (nbytes,), np.uint8)
                    memset(room, 1, 0, self.stream.ptr, "zeroing the unused room of a case's block")
                    bufs.free[f"free room at +{offset}"] = room
        bufs.fingerprints = self._fps({**bufs.const, **bufs.initial, **bufs.free}, bufs.key)
        self.resident.put(bufs)
        return bufs

    def _buffers(self, case, seed: int, obs: Observation) -> CaseBuffers:
        bufs = self.resident.get(case.name, seed)
        if bufs is not None:
            held = {n: bufs.held(n) for n in bufs.fingerprints}
            now = self._fps(held, bufs.key)
            damaged = [n for n, fp in now.items() if fp != bufs.fingerprints[n]]
            if bufs.expected is not None:
                exp_now = self._fps(bufs.expected, bufs.expected_key)
                if exp_now != bufs.expected_fingerprints:
                    damaged.append("expected values")
            if damaged:
                obs.restored = damaged
                self.resident.drop(case.name, seed)
                bufs = None
            else:
                obs.resident = True
        return bufs if bufs is not None else self._upload(case, seed)

    def _set_expected(self, bufs: CaseBuffers, expected: dict[str, np.ndarray]) -> None:
        """Upload the expected outputs and mask them at once (no candidate runs in between): only
        the comparison kernel, given ``bufs.mask_key`` after the candidate's launches, undoes it."""
        cp = self.cupy
        task = self.task
        bufs.mask_key = new_key() if mask.enabled() else None
        bufs.expected, bufs.expected_outside = {}, set()
        with self.stream:
            for a in task.outputs:
                values = np.ascontiguousarray(device_expected(expected[a.name], a.param.dtype, task.tolerance_for(a)))
                dev = bufs.expected_slot(a.name, values)       # the room kept in the case's block
                if dev is None:
                    dev = cp.asarray(values)
                    bufs.expected_outside.add(a.name)
                else:
                    dev.set(values, stream=self.stream)
                bufs.expected[a.name] = dev
        if bufs.mask_key is not None:
            for arr in bufs.expected.values():
                mask.mask_inplace(arr, bufs.mask_key, self.stream)
        bufs.expected_dtypes = {a.name: np.asarray(expected[a.name]).dtype for a in task.outputs}
        bufs.expected_key = new_key()
        bufs.expected_fingerprints = self._fps(bufs.expected, bufs.expected_key)
        self.resident.trim(keep=bufs)

    # -- one run --------------------------------------------------------------------------
    def run(self, spec: KernelSpec, plan: RunPlan, progress: Callable[[Progress], None] | None = None,
            need: Callable[[Need], Expected] | None = None) -> Observation:
        """Launch ``spec`` on (case, seed) as ``plan`` says and report what happened."""
        self._current = None
        try:
            return self._run(spec, plan, progress or (lambda p: None), need)
        except BaseException as exc:
            failure = classify(exc)
            if failure.sticky:
                self._dead = True      # the context is gone: the worker exits after answering
            else:
                self._release_kept()
                self._scrub_after_failure(spec)
            raise CaseFailure(failure) from None

    def _scrub_after_failure(self, spec: KernelSpec) -> None:
        """A run that failed part way may have left outputs in its buffers: poison them, wipe the
        module's globals (best effort: the failure is reported either way)."""
        try:
            bufs = self._current
            if bufs is not None:
                reset(self.task, bufs, self.stream.ptr, poison=True)
            mod = self.modules.get(spec.key) if spec.kind == "cuda" else None
            if mod is not None:
                mod.wipe(self.stream)
            if self._scrubbed is not None:
                self._scrubbed.scrub(self.stream)
            self.stream.synchronize()
        except Exception:  # noqa: BLE001 - the run's own failure is what gets reported
            pass

    def _release_kept(self) -> None:
        self._kept.clear()
        self._kept_key = None

    def _run(self, spec, plan: RunPlan, progress, need) -> Observation:
        """One run, stage by stage: the inputs and the launch, the checked launches, the timed
        launches, the kept copies checked, the outputs compared, the end of the run."""
        run = self._open_run(spec, plan, progress, need)
        if plan.check:
            self._checked_launches(run)
        if plan.time:
            self._timed_launches(run)
        self._check_kept_copies(run)
        self._compare_outputs(run)
        return self._close_run(run)

    # the stages of a run, in order
    def _open_run(self, spec, plan: RunPlan, progress, need) -> _CaseRun:
        """Stage 1, the inputs: (case, seed)'s buffers on the GPU (resident, or drawn and uploaded
        again), this run's keys, its launch bound to the buffers, and the const inputs'
        fingerprints at upload."""
        task = self.task
        case = task.case(plan.case)
        laps = _Laps()
        self._release_kept()
        obs = Observation(case=plan.case, seed=plan.seed, seconds=laps.secs)
        bufs = self._buffers(case, plan.seed, obs)
        self._current = bufs
        laps.lap("upload")
        outputs = [a.name for a in task.outputs]
        out_arrays = {n: bufs.work[n] for n in outputs}
        run_key = new_key()      # drawn for every run; only the fingerprint kernel is ever given it
        mask_key = new_key() if mask.enabled() else None   # the kept copies of this run's outputs
        run = _CaseRun(spec=spec, plan=plan, obs=obs, bufs=bufs, laps=laps, progress=progress, need=need,
                       outputs=outputs, out_arrays=out_arrays, run_key=run_key, mask_key=mask_key)
        run.launch, run.loaded = self._bind_launch(run)
        obs.input_fingerprints = {n: bufs.fingerprints[n] for n in bufs.const}
        return run

    def _checked_launches(self, run: _CaseRun) -> None:
        """Stage 2 (``plan.check``): the first checked launch, timed with events (the estimate the
        timing starts from), and with ``plan.repeat`` a second one on the same inputs.  After each,
        its outputs' fingerprints (a stage) and the const inputs'; after the first, the module
        globals it changed."""
        cp = self.cupy
        stream = self.stream
        plan, obs = run.plan, run.obs
        run.progress(Progress("launch"))
        start, end = cp.cuda.Event(), cp.cuda.Event()
        with stream:
            self._before_launch(run)
            start.record(stream)
            t0 = time.perf_counter()
            run.launch()
            end.record(stream)
            stream.synchronize()
        driver.synchronize("kernel execution")
        wall = time.perf_counter() - t0
        run.estimate = cp.cuda.get_elapsed_time(start, end) * 1e-3
        obs.first_launch_s = run.estimate
        run.progress(Progress("launched", wall))
        run.lap("launches")
        self._note_globals(run, FIRST)
        self._add_stage(run, FIRST, self._fps(run.out_arrays, run.run_key), later=plan.repeat or plan.time)
        self._note_const_inputs(run, FIRST)
        run.lap("fingerprints")
        if plan.repeat:
            with stream:
                self._before_launch(run)
                run.launch()
                stream.synchronize()
            driver.synchronize("kernel execution")
            run.lap("launches")
            self._add_stage(run, REPEAT, self._fps(run.out_arrays, run.run_key), later=plan.time)
            self._note_const_inputs(run, REPEAT)
            run.lap("fingerprints")

    def _timed_launches(self, run: _CaseRun) -> None:
        """Stage 3 (``plan.time``): the timed launches (:meth:`_time`), then the globals and const
        inputs they changed."""
        self._time(run)
        run.lap("timing")
        self._note_globals(run, "timed launches")
        self._note_const_inputs(run, "timed launches")
        run.lap("fingerprints")

    def _check_kept_copies(self, run: _CaseRun) -> None:
        """Stage 4: the copies kept of earlier stages (not the work buffers themselves), read again
        after every later launch: still what the stage left?"""
        for stage, arrays in run.stages:
            if arrays and stage.later_fingerprints is None and \
                    arrays.get(run.outputs[0]) is not run.out_arrays[run.outputs[0]]:
                stage.later_fingerprints = self._fps(arrays, run.run_key,
                                                     masked_with=run.mask_key if stage.stage in run.masked else None)
        run.lap("fingerprints")

    def _compare_outputs(self, run: _CaseRun) -> None:
        """Stage 5: every distinct stage against the expected outputs, on the GPU (``plan.compare``
        "gpu"; the expected outputs are asked for with ``need`` when none are resident, and sent
        again next time when they were found changed), or the values sent back for the parent
        to compare ("cpu")."""
        cp = self.cupy
        stream = self.stream
        plan, obs, bufs = run.plan, run.obs, run.bufs
        if plan.compare == "gpu" and any(not s.same_as for s, _ in run.stages):
            if bufs.expected is None:
                got = run.need(Need(plan.case, plan.seed)) if run.need else None
                if got is None or got.outputs is None:
                    raise CaseFailure(Failure("no_expected", "no expected outputs were sent", stage="compare"))
                run.lap("waiting for the reference")
                self._set_expected(bufs, got.outputs)
                run.lap("upload")
            self._compare(run)
            obs.expected_fingerprints = {n: (bufs.expected_fingerprints[n], fp) for n, fp in
                                         self._fps(bufs.expected, bufs.expected_key).items()}
            if any(a != b for a, b in obs.expected_fingerprints.values()):
                bufs.expected = None      # sent again next time
            run.lap("compare")
        elif plan.compare == "cpu":
            with stream:
                for stage, arrays in run.stages:
                    if not stage.same_as:
                        values = {n: cp.asnumpy(a) for n, a in arrays.items()}
                        if stage.stage in run.masked:
                            values = {n: mask.host_mask(v, run.mask_key) for n, v in values.items()}
                        stage.arrays = values
                stream.synchronize()
            run.lap("download")

    def _close_run(self, run: _CaseRun) -> Observation:
        """Stage 6, the end of the run.  Invariant 11: the outputs this run left are masked in
        place, the globals wiped, a baseline's pooled temporaries zeroed; every kept stage is
        then masked with the run's mask key and held for the Sample request.  A held const input
        or initial value that changed is dropped (uploaded again next time)."""
        plan, obs, bufs = run.plan, run.obs, run.bufs
        self._end_of_run(run.out_arrays, run.loaded, run.mask_key)
        for stage, arrays in run.stages:
            if not stage.same_as and plan.keep and plan.compare == "gpu":
                stage.kept = True
                self._kept[stage.stage] = arrays
        self._kept_key = run.mask_key
        obs.stages = [s for s, _ in run.stages]
        # held copies: a const input or an initial value that changed is uploaded again next time;
        # so is a block whose free room was written (memory reached by address, kept between launches)
        if bufs.initial or bufs.free:
            now = self._fps({**bufs.initial, **bufs.free}, bufs.key)
            obs.initial_fingerprints = {n: (bufs.fingerprints[n], fp) for n, fp in now.items() if n in bufs.initial}
            obs.free_room_fingerprints = {n: (bufs.fingerprints[n], fp) for n, fp in now.items() if n in bufs.free}
        if any(a != b for a, b in (*obs.initial_fingerprints.values(), *obs.free_room_fingerprints.values())) or any(
                obs.input_fingerprints[n] != fp for fps in obs.inputs_after.values() for n, fp in fps.items()):
            self.resident.drop(bufs.case, bufs.seed)
        run.lap("fingerprints")
        return obs

    # what the stages share
    def _bind_launch(self, run: _CaseRun) -> tuple[Callable[[], None], "_Loaded | None"]:
        """The run's launch and its loaded module: the CUDA kernel with its arguments packed (and
        the dynamic shared memory the launch asks for allowed where the GPU can), or the Python
        baseline with its buffers and scalars (no module)."""
        task, spec, bufs = self.task, run.spec, run.bufs
        if spec.kind == "cuda":
            mod = self.loaded(spec)
            launch_cfg = run.plan.launch
            if launch_cfg.shared_mem > mod.max_dynamic:
                mod.allow_dynamic(launch_cfg.shared_mem, self.info.max_smem_per_block_optin)
            values = []
            for arg in task.args:
                if arg.is_buffer:
                    values.append((bufs.kernel_buffer(arg.name).data.ptr, driver.ctypes.c_void_p))
                else:
                    values.append(scalar_arg(arg.param, bufs.scalars[arg.name]))
            packed = driver.PackedArgs(values)
            cooperative = bool(getattr(launch_cfg, "cooperative", False))
            return _KernelLaunch(mod, launch_cfg, self.stream.ptr, packed, cooperative), mod
        from pathlib import Path

        from kernel_forge.model.references import load_callable, python_name
        from kernel_forge.model.task import CallableRef
        fn = load_callable(CallableRef("python", Path(spec.module_path), spec.function))
        kwargs = {python_name(a.name): bufs.kernel_buffer(a.name) for a in task.args if a.is_buffer}
        kwargs.update({python_name(k): v for k, v in bufs.scalars.items()})
        if self._scrubbed is None:
            self._scrubbed = ScrubbedPool()
        return _PythonLaunch(fn, kwargs, self.stream, self._scrubbed), None

    def _before_launch(self, run: _CaseRun) -> None:
        """Before every launch: the module's globals back to their load-time image, then the
        outputs poisoned and the in/out buffers set to their initial values."""
        if run.loaded is not None:
            run.loaded.initial_state(self.stream)     # every launch starts from the module's load-time globals
        reset(self.task, run.bufs, self.stream.ptr, poison=True)

    def _keep_copy(self, run: _CaseRun) -> dict[str, object]:
        """The outputs now, kept masked with the run's key (invariant 11)."""
        kept = {}
        with self.stream:
            for n in run.outputs:
                kept[n] = self.cupy.empty_like(run.out_arrays[n])
                _masked_copy(kept[n], run.out_arrays[n], run.mask_key, self.stream)
        return kept

    def _add_stage(self, run: _CaseRun, name: str, fps: dict[str, int], later: bool) -> None:
        """A stage of the run: its outputs' fingerprints, and unless an earlier stage left the same
        outputs, the arrays holding its values (``later``: more launches follow, so a masked copy;
        else the work buffers themselves)."""
        same = next((s.stage for s, _ in run.stages if s.fingerprints == fps), None)
        stage = StageObservation(stage=name, fingerprints=fps, same_as=same)
        arrays = {} if same else (self._keep_copy(run) if later else dict(run.out_arrays))
        if arrays and later and run.mask_key is not None:
            run.masked.add(name)
        run.stages.append((stage, arrays))

    def _note_globals(self, run: _CaseRun, stage_name: str) -> None:
        """The module globals and __constant__ variables the stage's launches changed, and whether
        the image they are restored from was written to (a CUDA module with globals only)."""
        loaded, obs = run.loaded, run.obs
        if loaded is not None and loaded.state.ranges:
            names = loaded.state.changed(self.stream)
            if names:
                obs.globals_changed[stage_name] = list(names)
            consts = loaded.state.changed(self.stream, constants=True)
            if consts:
                obs.constants_changed[stage_name] = list(consts)
            if not loaded.state.image_intact(self.stream):
                obs.state_image_changed = True

    def _note_const_inputs(self, run: _CaseRun, stage_name: str) -> None:
        """The const inputs' fingerprints after the stage (one that changed is the kernel's write)."""
        if run.bufs.const:
            run.obs.inputs_after[stage_name] = self._fps(run.bufs.const, run.bufs.key)

    def _end_of_run(self, out_arrays: dict, loaded: "_Loaded | None", mask_key: int | None) -> None:
        stream = self.stream
        if mask_key is not None:
            for arr in out_arrays.values():
                mask.mask_inplace(arr, mask_key, stream)
        if loaded is not None:
            loaded.wipe(stream)
        if self._scrubbed is not None and loaded is None:
            self._scrubbed.scrub(stream)
        stream.synchronize()

    def _time(self, run: _CaseRun) -> None:
        """The timed launches (:func:`~kernel_forge.gpu.timing.bench`): their count from the first
        checked launch's GPU time (without one, a launch measured here) and the cost around each
        (resets, flush), measured once.  What the last timed launch left becomes a stage of the
        run in every mode (--quick too: fingerprinted, and compared on the GPU and sampled like the
        first launch unless it is the first launch's bits); with ``plan.after_timing`` the outputs
        of one chosen timed launch become one more."""
        cp = self.cupy
        stream = self.stream
        plan, obs, launch, bufs, stages = run.plan, run.obs, run.launch, run.bufs, run.stages
        out_arrays, estimate, run_key, mask_key = run.out_arrays, run.estimate, run.run_key, run.mask_key
        flush = self.flusher() if plan.timing.flush_l2 else None
        keep = plan.after_timing      # keep one chosen timed launch's outputs for checks (the last's: always)
        prep = functools.partial(self._before_launch, run)   # outputs poisoned before every timed launch, in every mode

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
        snapshot = _Snapshot()
        if keep:
            with stream:
                for n, a in out_arrays.items():
                    snapshot.arrays[n] = cp.empty_like(a)
        take_snapshot = functools.partial(self._take_snapshot, run, snapshot)

        warm = marker = None
        if flush is None:              # --no-flush: truly warm, each timed launch marked for the clock
            flusher = self.flusher()
            buffers = [bufs.kernel_buffer(a.name) for a in self.task.args if a.is_buffer]
            warm = functools.partial(flusher.warm, buffers, stream)
            marker = functools.partial(flusher.mark, stream)
        obs.timing = bench(launch, stream, warmup=warmup, reps=reps, flush=flush, prepare=prep,
                           after=(snap_at, take_snapshot) if keep else None, clock=self.clock,
                           warm=warm, marker=marker, min_reps=plan.timing.min_reps, max_noise=plan.timing.max_noise)
        driver.synchronize("timed launches")
        obs.warmup, obs.reps = warmup, len(obs.timing.samples_us)
        # the last timed launch's outputs, in every mode: one fingerprint pass, and one GPU comparison
        # only where they are not bit for bit an earlier stage's (invariant 8)
        add_fps = self._fps(out_arrays, run_key)
        same = next((s.stage for s, _ in stages if s.fingerprints == add_fps), None)
        stages.append((StageObservation(stage=AFTER_TIMING, fingerprints=add_fps, same_as=same),
                       {} if same else dict(out_arrays)))
        if keep:
            obs.snap_at = snap_at
            later = self._fps(snapshot.arrays, run_key, masked_with=mask_key)
            same = next((s.stage for s, _ in stages if s.fingerprints == snapshot.fingerprints), None)
            stage = StageObservation(stage=mid_timing(snap_at), fingerprints=dict(snapshot.fingerprints), same_as=same,
                                     later_fingerprints=later)
            stages.append((stage, {} if same else snapshot.arrays))
            if not same and mask_key is not None:
                run.masked.add(stage.stage)

    def _take_snapshot(self, run: _CaseRun, snapshot: _Snapshot) -> None:
        """Keep the chosen timed launch's outputs: the fingerprint is read back to the host before
        the next launch, so a later launch that scribbles on the kept copy is found out; the copy
        is kept masked (invariant 11)."""
        snapshot.fingerprints.update(self._fps(run.out_arrays, run.run_key))
        for n, a in run.out_arrays.items():
            _masked_copy(snapshot.arrays[n], a, run.mask_key, self.stream)

    def _compare(self, run: _CaseRun) -> None:
        from kernel_forge.gpu.compare import compare_on_gpu

        forge = bool(os.environ.get(FORGE_ENV))
        task = self.task
        bufs = run.bufs
        for stage, arrays in run.stages:
            if stage.same_as:
                continue
            for arg in task.outputs:
                actual = arrays[arg.name]
                if forge:
                    stage.outputs.append(OutputCheck(arg.name, True, int(actual.size)))
                    continue
                stage.outputs.append(compare_on_gpu(arg.name, actual, bufs.expected[arg.name], arg.param.dtype,
                                                    task.tolerance_for(arg), self.stream,
                                                    shape=tuple(actual.shape),
                                                    reference_dtype=bufs.expected_dtypes.get(arg.name),
                                                    actual_key=run.mask_key if stage.stage in run.masked else None,
                                                    expected_key=bufs.mask_key))

    # -- sample ---------------------------------------------------------------------------
    def sample(self, req: Sample) -> SampleValues:
        """The stored values at the asked indices of the kept stage outputs (unmasked here, on the
        host); then release them."""
        cp = self.cupy
        out: dict[str, dict[str, np.ndarray]] = {}
        key = self._kept_key
        try:
            with self.stream:
                for stage, names in req.indices.items():
                    kept = self._kept.get(stage, {})
                    out[stage] = {}
                    for name, idx in names.items():
                        if name in kept:
                            flat = kept[name].reshape(-1)
                            where = np.asarray(idx, dtype=np.int64)
                            got = cp.asnumpy(flat[cp.asarray(where)])
                            out[stage][name] = mask.unmask_at(got, where, key) if key is not None else got
            self.stream.synchronize()
        finally:
            self._release_kept()
        return SampleValues(out)

    def calibrate(self) -> dict:
        """Measured device-to-device copy bandwidth (bytes read + written per second)."""
        cp = self.cupy
        free, _total = cp.cuda.runtime.memGetInfo()
        nbytes = int(min(1 << 30, free // 8)) & ~0xFFFF
        bufs = {"src": cp.empty(nbytes, dtype=cp.uint8), "dst": cp.empty(nbytes, dtype=cp.uint8)}
        bufs["src"].fill(1)
        with self.stream:
            def copy_once():
                bufs["dst"].data.copy_from_device_async(bufs["src"].data, nbytes, self.stream)
            t = bench(copy_once, self.stream, warmup=3, reps=10, flush=None)
        bufs.clear()
        cp.get_default_memory_pool().free_all_blocks()
        bw = 2.0 * nbytes / (t.median * 1e-6)
        return {"copy_bytes": nbytes, "copy_us": t.median, "bandwidth": bw}


def _masked_copy(dst, src, key: int | None, stream) -> None:
    """``dst`` = ``src`` masked with ``key`` (a plain copy when masking is off)."""
    if key is None:
        from kernel_forge.gpu.resident import copy
        copy(dst, src, stream.ptr)
    else:
        mask.mask_copy(dst, src, key, stream)


def worker_main(conn, task_path: str, ordinal: int = 0, resident_bytes: int = 0) -> None:
    """Entry point of the worker process (spawned)."""
    why = kernel_clock.enable()          # first: CUPTI records arrive only if on before the context exists
    clock = "cupti" if why is None else why
    try:
        from kernel_forge.model.task import load_task
        task = load_task(task_path)
        runner = CaseRunner(task, ordinal, resident_bytes)
        conn.send((READY, Ready(device=runner.info.to_json(), pid=os.getpid(), clock=clock,
                                resident_bytes=runner.resident.budget, clock_offset=runner.clock_offset,
                                flush=runner.flush_kind)))
    except BaseException as exc:  # noqa: BLE001 - report anything to the parent, then exit
        conn.send((FATAL, {"type": type(exc).__name__, "message": str(exc),
                           "exit_code": getattr(exc, "exit_code", 3)}))
        conn.close()
        return

    def need(req: Need) -> Expected:
        conn.send((NEED, req))
        while True:
            kind, payload = conn.recv()
            if kind == EXPECTED:
                return payload
            if kind == EXIT:
                os._exit(0)

    while True:
        try:
            op, payload = conn.recv()
        except (EOFError, OSError):
            return
        if op == EXIT:
            return
        try:
            if op == RUN:
                assert isinstance(payload, Run)
                obs = runner.run(payload.spec, payload.plan, progress=lambda p: conn.send((PROGRESS, p)), need=need)
                conn.send((OK, obs))
            elif op == LOAD:
                conn.send((OK, runner.load(payload)))
            elif op == SAMPLE:
                conn.send((OK, runner.sample(payload)))
            elif op == CALIBRATE:
                conn.send((OK, runner.calibrate()))
            elif op == EXPECTED:
                continue          # an answer to a question no longer asked
            else:
                conn.send((ERROR, Failure("harness", f"unknown request {op!r}")))
        except BaseException as exc:  # noqa: BLE001
            failure = classify(exc, stage=op)
            conn.send((ERROR, failure))
            if failure.sticky or runner._dead:
                conn.close()
                os._exit(0)
