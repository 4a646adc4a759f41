"""Run one case of one kernel on the GPU, inside the gate's worker process.

:func:`worker_main` is the worker's entry point: it owns the CUDA context (through CuPy), answers
requests from the parent over a pipe, and never sees the reference's outputs.  A sticky CUDA
error ends the worker after its answer; the parent starts a fresh one.
"""
from __future__ import annotations

import hashlib
import os
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ..candidate import Launch
from ..dtypes import from_float, poison_value
from ..errors import CudaError, KForgeError
from ..inputs import generate
from ..task import Task
from . import driver
from .fingerprint import fingerprint, new_key
from .timing import L2Flusher, bench


@dataclass
class KernelSpec:
    """What to run: a compiled kernel (cubin) or a Python baseline callable."""

    kind: str                          # "cuda" or "python"
    label: str
    cubin: bytes | None = None
    entry: str = ""
    launch: Launch | None = None
    defines: dict = field(default_factory=dict)
    module_path: str = ""              # python baselines
    function: str = ""

    @property
    def key(self) -> str:
        h = hashlib.sha256()
        h.update(self.kind.encode() + self.label.encode() + self.entry.encode())
        h.update(self.cubin or self.module_path.encode() + self.function.encode())
        return h.hexdigest()


@dataclass
class RunOptions:
    seed: int
    check: bool = True            # poison outputs and return them
    repeat: bool = True           # second launch on the same inputs, compare bit-for-bit
    time: bool = False
    warmup: int = 10
    reps: int = 100
    flush: bool = True
    return_after_timing: bool = True


class CaseFailure(Exception):
    def __init__(self, reason: str, message: str, *, code: str = "", sticky: bool = False):
        super().__init__(message)
        self.reason, self.message, self.code, self.sticky = reason, message, code, sticky


def classify(exc: BaseException) -> CaseFailure:
    """Map a CUDA/CuPy exception to a gate reason."""
    if isinstance(exc, CaseFailure):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    code = exc.code if isinstance(exc, CudaError) else ""
    if not code:
        for token in str(exc).replace(":", " ").split():
            if token.startswith(("CUDA_ERROR_", "cudaError")):
                code = token
                break
    norm = code.upper().replace("CUDAERROR", "CUDA_ERROR_")
    if "OutOfMemory" in type(exc).__name__ or "OUT_OF_MEMORY" in norm or "MEMORYALLOCATION" in norm:
        return CaseFailure("out_of_memory", text, code=code or "CUDA_ERROR_OUT_OF_MEMORY")
    sticky_names = {n.replace("CUDA_ERROR_", "").replace("_", "") for n in driver.STICKY}
    flat = norm.replace("CUDA_ERROR_", "").replace("_", "")
    if code and flat in sticky_names or "illegal" in text.lower():
        return CaseFailure("crash", text, code=code, sticky=True)
    if code:
        return CaseFailure("launch_failed", text, code=code)
    return CaseFailure("harness_error", text + "\n" + traceback.format_exc(limit=-4))


class CaseRunner:
    """Holds the device state of a worker: context, stream, loaded modules, L2 flusher."""

    def __init__(self, task: Task, ordinal: int = 0):
        import cupy

        self.cupy = cupy
        self.task = task
        driver.probe()
        cupy.cuda.Device(ordinal).use()
        cupy.zeros(1)  # makes CuPy's primary context current for the driver calls
        self.info = driver.device_info(ordinal)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.modules: dict[str, driver.Module] = {}
        self.baselines: dict[str, object] = {}
        self._flusher: L2Flusher | None = None
        self._inputs: dict[tuple[str, int], object] = {}

    def inputs(self, case, seed: int):
        """Host inputs of (case, seed), drawn once and kept for the next candidates (read-only)."""
        key = (case.name, seed)
        if key not in self._inputs:
            budget = 4 << 30
            size = lambda ci: sum(b.nbytes for b in ci.buffers.values())  # noqa: E731
            while self._inputs and sum(size(v) for v in self._inputs.values()) > budget:
                self._inputs.pop(next(iter(self._inputs)))
            self._inputs[key] = generate(self.task, case, seed)
        return self._inputs[key]

    # -- helpers ------------------------------------------------------------------------
    def flusher(self) -> L2Flusher:
        if self._flusher is None:
            self._flusher = L2Flusher(self.info.l2_bytes or (64 << 20))
        return self._flusher

    def module(self, spec: KernelSpec) -> driver.Module:
        mod = self.modules.get(spec.key)
        if mod is None:
            if len(self.modules) > 32:
                for m in self.modules.values():
                    m.unload()
                self.modules.clear()
            mod = driver.Module(spec.cubin, spec.entry)
            self.modules[spec.key] = mod
        return mod

    def check_launch(self, grid, block, smem, mod: driver.Module | None) -> None:
        info = self.info
        threads = block[0] * block[1] * block[2]
        problems = []
        if min(grid) < 1 or min(block) < 1:
            problems.append(f"grid {grid} and block {block} need every dimension >= 1")
        if threads > info.max_threads_per_block:
            problems.append(f"block {block} has {threads} threads; this GPU allows {info.max_threads_per_block}")
        for i, (b, mb) in enumerate(zip(block, info.max_block)):
            if b > mb:
                problems.append(f"block dimension {'xyz'[i]} = {b} exceeds {mb}")
        for i, (g, mg) in enumerate(zip(grid, info.max_grid)):
            if g > mg:
                problems.append(f"grid dimension {'xyz'[i]} = {g} exceeds {mg}")
        if smem < 0:
            problems.append(f"dynamic shared memory {smem} is negative")
        static = mod.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES") if mod else 0
        if smem + static > info.max_smem_per_block_optin:
            problems.append(f"{smem} bytes of dynamic + {static} of static shared memory exceed this GPU's "
                            f"opt-in maximum of {info.max_smem_per_block_optin} bytes per block")
        if mod is not None:
            max_threads = mod.attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK")
            if threads > max_threads:
                regs = mod.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")
                problems.append(f"block of {threads} threads exceeds this kernel's limit of {max_threads} "
                                f"({regs} registers per thread or __launch_bounds__)")
        if problems:
            raise CaseFailure("launch_config", "; ".join(problems))
        if mod is not None and smem > info.max_smem_per_block:
            mod.set_max_dynamic_smem(smem)

    def _scalar_ctype(self, param, value):
        dt = param.dtype
        if dt.name == "float16":
            return int(np.float16(value).view(np.uint16)), dt.ctype
        if dt.name == "bfloat16":
            return int(from_float(np.array([value], np.float32), dt)[0]), dt.ctype
        return value, dt.ctype

    # -- one case -----------------------------------------------------------------------
    def run_case(self, spec: KernelSpec, case_name: str, opts: RunOptions, progress=None) -> dict:
        cp = self.cupy
        task = self.task
        case = task.case(case_name)
        inputs = self.inputs(case, opts.seed)
        out: dict = {"case": case_name, "seed": opts.seed}
        dev: dict[str, object] = {}
        pristine: dict[str, object] = {}
        key = new_key()        # drawn for every case run; only the fingerprint kernel is ever given it

        def fp(array) -> int:
            return fingerprint(array, key, self.stream)

        try:
            with self.stream:
                for arg in task.args:
                    if arg.is_buffer:
                        dev[arg.name] = cp.asarray(inputs.buffers[arg.name])
                        if arg.in_out:
                            pristine[arg.name] = dev[arg.name].copy()
                self.stream.synchronize()
            # what the const inputs hold before any launch (the host copy they came from, bit for bit)
            const_fp = {a.name: fp(dev[a.name]) for a in task.args if a.is_buffer and a.param.const}

            pure = [a for a in task.outputs if not a.in_out]

            def poison_and_reset():
                for a in pure:
                    dev[a.name].fill(poison_value(a.param.dtype))
                for name, p in pristine.items():
                    cp.copyto(dev[name], p)

            def reset_only():
                for name, p in pristine.items():
                    cp.copyto(dev[name], p)

            if spec.kind == "cuda":
                mod = self.module(spec)
                sizes = mod.param_sizes()
                want = [8 if a.is_buffer else a.param.dtype.itemsize for a in task.args]
                if sizes is not None and sizes != want:
                    raise CaseFailure("signature_mismatch",
                                      f"the compiled kernel's parameter sizes are {sizes} bytes; the task's "
                                      f"signature needs {want}")
                variables = dict(case.vars)
                variables.update(spec.defines)
                try:
                    grid, block, smem = spec.launch.resolve(variables)
                except KForgeError as exc:
                    raise CaseFailure("launch_config", f"launch expression: {exc}") from None
                out["launch"] = {"grid": list(grid), "block": list(block), "shared_mem": smem}
                self.check_launch(grid, block, smem, mod)
                values = []
                for arg in task.args:
                    if arg.is_buffer:
                        values.append((dev[arg.name].data.ptr, driver.ctypes.c_void_p))
                    else:
                        values.append(self._scalar_ctype(arg.param, inputs.scalars[arg.name]))
                packed = driver.PackedArgs(values)
                stream_ptr = self.stream.ptr

                def launch():
                    driver.launch(mod, grid, block, smem, stream_ptr, packed)
            else:
                from ..references import load_callable
                from ..task import CallableRef
                from pathlib import Path
                fn = load_callable(CallableRef("python", Path(spec.module_path), spec.function))
                kwargs = dict(dev)
                kwargs.update(inputs.scalars)

                def launch():
                    with self.stream:
                        fn(**kwargs)

            def checked_launch():
                with self.stream:
                    poison_and_reset()
                t0 = time.perf_counter()
                launch()
                self.stream.synchronize()
                driver.synchronize("kernel execution")
                return time.perf_counter() - t0

            first_fp: dict[str, int] = {}

            def download():
                return {a.name: cp.asnumpy(dev[a.name]) for a in task.outputs}

            def download_stage(now: dict[str, int] | None = None, arrays: dict | None = None) -> dict:
                # an output bit-for-bit the first launch's is sent as that very array: the pipe pickles
                # it once and the gate sees at once that it needs no second check
                arrays = dev if arrays is None else arrays
                stage = {}
                for a in task.outputs:
                    same = (now[a.name] if now is not None else fp(dev[a.name])) == first_fp.get(a.name)
                    stage[a.name] = out["outputs"][a.name] if same else cp.asnumpy(arrays[a.name])
                return stage

            def const_inputs_changed() -> list[str]:
                return [name for name, before in const_fp.items() if fp(dev[name]) != before]

            if opts.check:
                if progress:
                    progress({"stage": "launch"})
                seconds = checked_launch()
                out["first_launch_s"] = seconds
                if progress:
                    progress({"first_launch_s": seconds})
                out["outputs"] = download()
                first_fp.update({a.name: fp(dev[a.name]) for a in task.outputs})
                out["inputs_modified"] = const_inputs_changed()
                if opts.repeat and not out["inputs_modified"]:
                    checked_launch()
                    out["outputs_repeat"] = download_stage()
                    out["inputs_modified"] = const_inputs_changed()
            if opts.time:
                # every timed launch starts from poisoned outputs (outside the timed window), and the
                # outputs of one randomly chosen timed launch are kept, so a kernel that skips work
                # once it has been checked is caught; the warm-up count varies so launches can't be counted
                import random
                rng = random.SystemRandom()   # unpredictable, even for a kernel that saw this seed before
                snap_at = rng.randrange(opts.reps)
                snapshot: dict = {}
                snap_fp: dict[str, int] = {}

                def take_snapshot():
                    # the fingerprint is read back to the host before the next launch, so a later
                    # launch that scribbles on the kept copy is found out below
                    for a in task.outputs:
                        snapshot[a.name] = dev[a.name].copy()
                        snap_fp[a.name] = fp(dev[a.name])

                with self.stream:
                    poison_and_reset()
                timing = bench(launch, self.stream, warmup=opts.warmup + rng.randrange(4), reps=opts.reps,
                               flush=self.flusher() if opts.flush else None,
                               prepare=poison_and_reset if opts.return_after_timing else (reset_only if pristine else None),
                               after=(snap_at, take_snapshot) if opts.return_after_timing else None)
                driver.synchronize("timed launches")
                out["timing"] = timing.to_json()
                if opts.return_after_timing:
                    out["outputs_after_timing"] = download_stage()
                    for name, kept in snapshot.items():
                        if snap_fp[name] != first_fp.get(name) and fp(kept) != snap_fp[name]:
                            raise CaseFailure("stale_after_timing",
                                              f"the copy of output {name} kept after timed launch {snap_at} "
                                              "was overwritten by a later launch (a write outside the "
                                              "kernel's own buffers)")
                    out["outputs_mid_timing"] = download_stage(snap_fp, snapshot)
                    out["mid_timing_launch"] = snap_at
                    snapshot.clear()
                    if opts.check and not out.get("inputs_modified"):
                        out["inputs_modified"] = const_inputs_changed()
            return out
        except BaseException as exc:
            failure = classify(exc)
            if failure.sticky:
                # the context is dead and the process is about to exit: freeing would only print errors
                self._dead = True
                self._graveyard = (dict(dev), dict(pristine))
                raise failure from None
            raise
        finally:
            if not getattr(self, "_dead", False):
                dev.clear()
                pristine.clear()
                try:
                    cp.get_default_memory_pool().free_all_blocks()
                except Exception:  # noqa: BLE001 - context may be dead after a sticky error
                    pass

    def calibrate(self) -> dict:
        """Measured device-to-device copy bandwidth (bytes read + written per second)."""
        cp = self.cupy
        free, _total = cp.cuda.runtime.memGetInfo()
        nbytes = int(min(1 << 30, free // 8)) & ~0xFFFF
        bufs = {"src": cp.empty(nbytes, dtype=cp.uint8), "dst": cp.empty(nbytes, dtype=cp.uint8)}
        bufs["src"].fill(1)
        with self.stream:
            def copy():
                bufs["dst"].data.copy_from_device_async(bufs["src"].data, nbytes, self.stream)
            t = bench(copy, self.stream, warmup=3, reps=10, flush=None)
        bufs.clear()
        cp.get_default_memory_pool().free_all_blocks()
        bw = 2.0 * nbytes / (t.median * 1e-6)
        return {"copy_bytes": nbytes, "copy_us": t.median, "bandwidth": bw}


def worker_main(conn, task_path: str, ordinal: int = 0) -> None:
    """Entry point of the worker process (spawned)."""
    try:
        from ..task import load_task
        task = load_task(task_path)
        runner = CaseRunner(task, ordinal)
        conn.send(("ready", {"device": runner.info.to_json(), "pid": os.getpid()}))
    except BaseException as exc:  # noqa: BLE001 - report anything to the parent, then exit
        conn.send(("fatal", {"type": type(exc).__name__, "message": str(exc),
                             "exit_code": getattr(exc, "exit_code", 3)}))
        conn.close()
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        op, payload = msg
        if op == "exit":
            return
        try:
            if op == "run":
                spec, case_name, opts = payload
                result = runner.run_case(spec, case_name, opts,
                                         progress=lambda info: conn.send(("progress", info)))
                conn.send(("ok", result))
            elif op == "calibrate":
                conn.send(("ok", runner.calibrate()))
            else:
                conn.send(("error", {"reason": "harness_error", "message": f"unknown op {op}"}))
        except BaseException as exc:  # noqa: BLE001
            failure = classify(exc)
            conn.send(("error", {"reason": failure.reason, "message": failure.message,
                                 "code": failure.code, "sticky": failure.sticky}))
            if failure.sticky:
                conn.close()
                os._exit(0)
