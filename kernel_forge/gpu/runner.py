"""The gate's worker: loads, launches, times and compares on the GPU, and reports what it saw.

:func:`worker_main` is the worker's entry point: it turns the CUPTI kernel clock on before any
CUDA context exists, owns the context (through CuPy), and answers the requests of
:mod:`kernel_forge.model.worker_protocol` over a pipe.  It never decides a verdict: every answer is an
observation (``ModuleFacts``, ``Observation``, ``Failure``) that the gate's checks judge.  A
sticky CUDA error ends the worker after its answer; the parent starts a fresh one.

:class:`CaseRunner` runs the stages of one run in order; what each part decides lives beside it:
whose fault a failure is (:mod:`.failure`), the loaded module and the launch (:mod:`.launch`),
the case's buffers and expected values (:mod:`.case_inputs`), what a stage records
(:mod:`.case_run`) and the timed launches (:mod:`.timed_launches`).
"""
from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

import numpy as np

from kernel_forge.model.task import Task
from kernel_forge.model.tolerance import OutputCheck
from kernel_forge.model.worker_protocol import CALIBRATE, ERROR, EXIT, EXPECTED, FATAL, FIRST, LOAD, NEED, OK, PROGRESS, READY, REPEAT, RUN, SAMPLE, Expected, Failure, KernelSpec, Load, ModuleFacts, Need, Observation, Progress, Ready, Run, RunPlan, Sample, SampleValues
from kernel_forge.gpu import driver, kernel_clock, mask
from kernel_forge.gpu.case_inputs import CaseInputs
from kernel_forge.gpu.case_run import CaseRun, Laps
from kernel_forge.gpu.failure import CaseFailure, classify
from kernel_forge.gpu.fingerprint import fingerprint_named, new_key
from kernel_forge.gpu.flush import L2Flusher
from kernel_forge.gpu.launch import LoadedModule, kernel_launch, module_facts, python_launch, sm_limits
from kernel_forge.gpu.resident import CaseBuffers, Resident, reset
from kernel_forge.gpu.timed_launches import time_launches
from kernel_forge.gpu.timing import bench
from kernel_forge.gpu.scrubbed_pool import ScrubbedPool

__all__ = ["CaseRunner", "KernelSpec", "worker_main"]

#: test hook: the GPU comparison reports every output as matching (the sample check must catch it)
FORGE_ENV = "KFORGE_TEST_FORGE_COMPARE"


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
        self.sm = sm_limits(ordinal)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.modules: dict[str, LoadedModule] = {}
        self._flusher: L2Flusher | None = None
        if not resident_bytes:
            free, _total = cupy.cuda.runtime.memGetInfo()
            resident_bytes = int(min(16 << 30, free // 4))
        self.resident = Resident(resident_bytes)
        self.inputs = CaseInputs(task, self.stream, self.resident, separate_buffers=separate_buffers)
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

    def loaded(self, spec: KernelSpec) -> LoadedModule:
        mod = self.modules.get(spec.key)
        if mod is None:
            if len(self.modules) > 32:
                for m in self.modules.values():
                    m.wipe(self.stream)
                self.stream.synchronize()
                for m in self.modules.values():
                    m.module.unload()
                self.modules.clear()
            mod = LoadedModule(spec)
            self.modules[spec.key] = mod
        return mod

    def _fps(self, arrays: dict[str, object], key: int, masked_with: int | None = None) -> dict[str, int]:
        return fingerprint_named(arrays, key, self.stream, masked_with=masked_with)

    # -- load -----------------------------------------------------------------------------
    def load(self, req: Load) -> ModuleFacts:
        t0 = time.perf_counter()
        return module_facts(self.loaded(req.spec), req.launches, self.info, self.sm, t0)

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
    def _open_run(self, spec, plan: RunPlan, progress, need) -> CaseRun:
        """Stage 1, the inputs: (case, seed)'s buffers on the GPU (resident, or drawn and uploaded
        again), this run's keys, its launch bound to the buffers, and the const inputs'
        fingerprints at upload."""
        task = self.task
        case = task.case(plan.case)
        laps = Laps()
        self._release_kept()
        obs = Observation(case=plan.case, seed=plan.seed, seconds=laps.secs)
        bufs = self.inputs.buffers(case, plan.seed, obs)
        self._current = bufs
        laps.lap("upload")
        outputs = [a.name for a in task.outputs]
        out_arrays = {n: bufs.work[n] for n in outputs}
        run_key = new_key()      # drawn for every run; only the fingerprint kernel is ever given it
        mask_key = new_key() if mask.enabled() else None   # the kept copies of this run's outputs
        run = CaseRun(spec=spec, plan=plan, obs=obs, bufs=bufs, laps=laps, progress=progress, need=need,
                      outputs=outputs, out_arrays=out_arrays, run_key=run_key, mask_key=mask_key,
                      stream=self.stream)
        run.launch, run.loaded = self._bind_launch(run)
        obs.input_fingerprints = {n: bufs.fingerprints[n] for n in bufs.const}
        return run

    def _checked_launches(self, run: CaseRun) -> None:
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
        run.note_globals(FIRST)
        run.add_stage(FIRST, run.output_fingerprints(), later=plan.repeat or plan.time)
        run.note_const_inputs(FIRST)
        run.lap("fingerprints")
        if plan.repeat:
            with stream:
                self._before_launch(run)
                run.launch()
                stream.synchronize()
            driver.synchronize("kernel execution")
            run.lap("launches")
            run.add_stage(REPEAT, run.output_fingerprints(), later=plan.time)
            run.note_const_inputs(REPEAT)
            run.lap("fingerprints")

    def _timed_launches(self, run: CaseRun) -> None:
        """Stage 3 (``plan.time``): the timed launches (:meth:`_time`), then the globals and const
        inputs they changed."""
        self._time(run)
        run.lap("timing")
        run.note_globals("timed launches")
        run.note_const_inputs("timed launches")
        run.lap("fingerprints")

    def _check_kept_copies(self, run: CaseRun) -> None:
        """Stage 4: the copies kept of earlier stages (not the work buffers themselves), read again
        after every later launch: still what the stage left?"""
        for stage, arrays in run.stages:
            if arrays and stage.later_fingerprints is None and \
                    arrays.get(run.outputs[0]) is not run.out_arrays[run.outputs[0]]:
                stage.later_fingerprints = self._fps(arrays, run.run_key,
                                                     masked_with=run.mask_key if stage.stage in run.masked else None)
        run.lap("fingerprints")

    def _compare_outputs(self, run: CaseRun) -> None:
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
                self.inputs.set_expected(bufs, got.outputs)
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

    def _close_run(self, run: CaseRun) -> Observation:
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
    # what the stages share
    def _bind_launch(self, run: CaseRun) -> tuple[Callable[[], None], "LoadedModule | None"]:
        """The run's launch and its loaded module: the CUDA kernel (:func:`~.launch.kernel_launch`),
        or the Python baseline with its buffers and scalars (no module)."""
        if run.spec.kind == "cuda":
            mod = self.loaded(run.spec)
            return kernel_launch(mod, run.plan.launch, self.task, run.bufs, self.stream.ptr,
                                 self.info.max_smem_per_block_optin), mod
        if self._scrubbed is None:
            self._scrubbed = ScrubbedPool()
        return python_launch(run.spec, self.task, run.bufs, self.stream, self._scrubbed), None

    def _before_launch(self, run: CaseRun) -> None:
        """Before every launch: the module's globals back to their load-time image, then the
        outputs poisoned and the in/out buffers set to their initial values."""
        if run.loaded is not None:
            run.loaded.initial_state(self.stream)     # every launch starts from the module's load-time globals
        reset(self.task, run.bufs, self.stream.ptr, poison=True)

    def _end_of_run(self, out_arrays: dict, loaded: "LoadedModule | None", mask_key: int | None) -> None:
        stream = self.stream
        if mask_key is not None:
            for arr in out_arrays.values():
                mask.mask_inplace(arr, mask_key, stream)
        if loaded is not None:
            loaded.wipe(stream)
        if self._scrubbed is not None and loaded is None:
            self._scrubbed.scrub(stream)
        stream.synchronize()

    def _time(self, run: CaseRun) -> None:
        """The timed launches (:func:`~.timed_launches.time_launches`), each after the same
        preparation as every checked launch."""
        time_launches(run, self.task, self.flusher(), self.clock, functools.partial(self._before_launch, run))

    def _compare(self, run: CaseRun) -> None:
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
