"""The gate: candidate → :class:`~kernel_forge.verdict.Evaluation`.

The candidate runs in a worker process (``spawn``, so Windows works too) that owns its own CUDA
context; reference outputs are computed here, in the parent (Python references) or in a
separate reference worker (CUDA references), and compared only after the candidate's work is
complete.  A hang is killed and reported as ``timeout``; a sticky CUDA error ends that worker
and the next request gets a fresh one.  Candidate faults never raise past :meth:`Gate.evaluate`.
"""
from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ThreadPoolExecutor
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import static_rules
from .candidate import Candidate
from .errors import (CandidateError, CompileError, EnvironmentProblem, KForgeError, NoGPUError,
                     ReferenceError_, SignatureError)
from .inputs import generate
from .references import run_python_reference
from .signature import check_matches, find_entry
from .stats import geomean, summarize
from .task import Case, Task
from .verdict import CaseResult, Evaluation
from .verify import compare, outputs_identical


@dataclass
class GateOptions:
    """How strictly and how long the gate checks. The CLI and the loop fill this in."""

    warmup: int = 10                 #: untimed launches before timing each performance case
    reps: int = 100                  #: timed launches per performance case (every sample kept)
    flush_l2: bool = True            #: flush the L2 before each timed launch (outside the window)
    seed: int = 0                    #: seed of the first input draw of every case
    extra_draws: int = 1             #: further draws with fresh seeds per case (catches memoisation)
    repeat_check: bool = True        #: launch twice on the same inputs; outputs must agree
    check_after_timing: bool = True  #: re-verify the outputs left by the timed launches
    plausibility: bool = True        #: flag times faster than the GPU's bandwidth/FLOP rate allow
    fail_fast: bool = False          #: stop at the first failing case
    launch_timeout_s: float = 10.0   #: wall time allowed for one checked launch
    timing_timeout_s: float = 120.0  #: wall time allowed for the timed launches of one case
    arch: str | None = None          #: compile for this arch instead of the GPU's
    device: int = 0                  #: CUDA device ordinal
    sanitize: bool = False           #: run compute-sanitizer before accepting (see sanitizer.py)
    plausible_margin: float = 1.25   #: allowed excess over measured bandwidth before "implausible"
    fresh_seeds: list[int] = field(default_factory=list)  #: seeds of the extra draws (chosen if empty)

    @property
    def strict(self) -> bool:
        return self.extra_draws > 0 and self.repeat_check and self.check_after_timing

    @classmethod
    def quick(cls, **kw) -> "GateOptions":
        """One draw, no repeat or post-timing checks: the plain harness of step 1."""
        base = dict(extra_draws=0, repeat_check=False, check_after_timing=False)
        base.update(kw)
        return cls(**base)


class WorkerError(Exception):
    def __init__(self, reason: str, message: str, code: str = "", sticky: bool = False):
        super().__init__(message)
        self.reason, self.message, self.code, self.sticky = reason, message, code, sticky


class Worker:
    """A spawned worker process running :func:`kernel_forge.gpu.runner.worker_main`."""

    def __init__(self, task_path: Path, device: int = 0, start_timeout: float = 120.0):
        from .gpu.runner import worker_main

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, str(task_path), device), daemon=True)
        self.proc.start()
        child.close()
        kind, payload = self._recv(start_timeout, "starting the GPU worker")
        if kind == "fatal":
            self.close()
            if payload.get("exit_code") == 3 or payload["type"] in ("NoGPUError", "EnvironmentProblem"):
                raise EnvironmentProblem(payload["message"])
            raise KForgeError(f"the GPU worker could not start: {payload['type']}: {payload['message']}")
        self.device = payload["device"]
        self.pid = payload["pid"]

    def _recv(self, timeout: float, what: str):
        if not self.conn.poll(timeout):
            raise WorkerError("timeout", f"no answer after {timeout:.1f} s while {what}")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(1)
            raise WorkerError("worker_died", f"the worker exited (code {self.proc.exitcode}) while {what}") from None

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def request(self, op: str, payload, *, first_timeout: float, rest_timeout: float, what: str,
                launch_timeout: float | None = None):
        """Send a request and wait for its answer: ``first_timeout`` for the set-up (inputs, upload,
        module load), ``launch_timeout`` once the worker says the first checked launch started, then
        ``rest_timeout`` (or 20x the first launch's time per remaining launch) for the rest."""
        try:
            self.conn.send((op, payload))
        except (BrokenPipeError, OSError):
            raise WorkerError("worker_died", "the worker is gone") from None
        timeout = first_timeout
        while True:
            kind, body = self._recv(timeout, what)
            if kind == "progress":
                if body.get("stage") == "launch":      # the first checked launch starts now
                    timeout = launch_timeout if launch_timeout is not None else first_timeout
                else:                                   # it finished: allow the rest its share
                    first = body.get("first_launch_s", 0.0)
                    timeout = max(rest_timeout, 20 * first * 150)
                continue
            if kind == "ok":
                return body
            raise WorkerError(body.get("reason", "harness_error"), body.get("message", ""),
                              body.get("code", ""), body.get("sticky", False))

    def close(self, kill: bool = False) -> None:
        if self.proc.is_alive() and not kill:
            try:
                self.conn.send(("exit", None))
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        try:
            self.conn.close()
        except OSError:
            pass


class Gate:
    """Evaluates candidates for one task. Reuse one gate for many candidates (it keeps the
    worker while it is healthy and caches reference outputs per (case, seed))."""

    def __init__(self, task: Task, options: GateOptions | None = None):
        self.task = task
        self.options = options or GateOptions()
        if not self.options.fresh_seeds:
            rng = random.SystemRandom()
            self.options.fresh_seeds = [rng.randrange(1, 2**31) for _ in range(self.options.extra_draws)]
        self._worker: Worker | None = None
        self._ref_worker: Worker | None = None
        self._expected: dict[tuple[str, int], dict[str, np.ndarray]] = {}
        self.device: dict | None = None
        self.calibration: dict | None = None
        self.restarts = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kforge-reference")
        self.progress = lambda message: None   #: called with one line per finished case
        if self.options.sanitize:
            from .sanitizer import find_sanitizer
            find_sanitizer()   # says clearly, before any work, that the tool is missing

    # -- worker management ------------------------------------------------------------------
    def worker(self) -> Worker:
        if self._worker is None or not self._worker.alive:
            if self._worker is not None:
                self._worker.close(kill=True)
                self.restarts += 1
            self._worker = Worker(self.task.path, self.options.device)
            self.device = self._worker.device
        return self._worker

    def _drop_worker(self) -> None:
        if self._worker is not None:
            self._worker.close(kill=True)
            self._worker = None
            self.restarts += 1

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for w in (self._worker, self._ref_worker):
            if w is not None:
                w.close()
        self._worker = self._ref_worker = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def device_info(self) -> dict:
        if self.device is None:
            self.worker()
        return self.device

    def calibrate(self) -> dict:
        """Measured copy bandwidth and the device's FLOP/s peaks (cached per gate)."""
        if self.calibration is None:
            w = self.worker()
            cal = w.request("calibrate", None, first_timeout=60, rest_timeout=60, what="calibrating")
            dev = self.device_info()
            cal["fp32_peak"] = dev["fp32_peak"]
            cal["tensor_peak"] = dev["tensor_peak"]
            cal["theoretical_bandwidth"] = dev["theoretical_bandwidth"]
            self.calibration = cal
        return self.calibration

    @property
    def arch(self) -> str:
        if self.options.arch:
            return self.options.arch
        return self.device_info()["arch"]

    # -- preparation (no GPU) ----------------------------------------------------------------
    def prepare(self, candidate: Candidate) -> tuple["KernelSpecT", dict]:
        """Static rules, signature, launch and compile. Raises KForgeError subclasses."""
        from .gpu.nvrtc import compile_source
        from .gpu.runner import KernelSpec

        findings = static_rules.check(candidate.source)
        if findings:
            raise CandidateError("; ".join(str(f) for f in findings[:3]), file=candidate.name)
        found = find_entry(candidate.source, self.task.signature.name)
        if found is None:
            raise SignatureError(f'{candidate.name}: no `extern "C" __global__ void {self.task.signature.name}(...)` '
                                 "definition found",
                                 hint=f"the entry point must be: {self.task.signature.text}")
        sig, line = found
        try:
            check_matches(self.task.signature, sig)
        except SignatureError as exc:
            raise SignatureError(f"{candidate.name}:{line}: {exc.message}") from None
        launch = candidate.launch or self.task.launch
        if launch is None:
            raise CandidateError("no launch configuration: the manifest has no \"launch\" and the kernel no "
                                 "`// kforge: grid = [...]` / `block = [...]` header", file=candidate.name)
        result = compile_source(candidate.source, arch=self.arch, defines=candidate.compile_defines(),
                                file_label=Path(candidate.name).name if candidate.name.endswith(".cu") else "kernel.cu")
        spec = KernelSpec(kind="cuda", label=candidate.name, cubin=result.cubin,
                          entry=self.task.signature.name, launch=launch, defines=candidate.compile_defines())
        return spec, result.to_json()

    # -- references -------------------------------------------------------------------------
    def expected(self, case: Case, seed: int) -> dict[str, np.ndarray]:
        key = (case.name, seed)
        if key not in self._expected:
            if len(self._expected) > 64:
                self._expected.clear()
            if self.task.reference.kind == "python":
                self._expected[key] = run_python_reference(self.task, generate(self.task, case, seed))
            else:
                self._expected[key] = self._cuda_reference(case, seed)
        return self._expected[key]

    def _cuda_reference(self, case: Case, seed: int) -> dict[str, np.ndarray]:
        from .candidate import load_candidate
        from .gpu.runner import RunOptions

        ref = load_candidate(self.task.reference.path)
        try:
            spec, _ = self.prepare(ref)
        except KForgeError as exc:
            raise ReferenceError_(f"the CUDA reference {self.task.reference.path} is unusable: {exc}") from None
        if self._ref_worker is None or not self._ref_worker.alive:
            self._ref_worker = Worker(self.task.path, self.options.device)
        try:
            out = self._ref_worker.request("run", (spec, case.name, RunOptions(seed=seed, repeat=False)),
                                           first_timeout=max(60, self.options.launch_timeout_s),
                                           rest_timeout=60, what="running the CUDA reference")
        except WorkerError as exc:
            self._ref_worker.close(kill=True)
            self._ref_worker = None
            raise ReferenceError_(f"the CUDA reference failed on case {case.name!r}: {exc.reason}: {exc.message}") from None
        return out["outputs"]

    # -- evaluation -------------------------------------------------------------------------
    def evaluate(self, candidate: Candidate, *, roles: tuple[str, ...] = ("correctness", "performance"),
                 time_cases: bool = True, kind: str = "candidate", only: set[str] | None = None) -> Evaluation:
        t0 = time.perf_counter()
        ev = Evaluation(label=candidate.name, passed=False, defines=candidate.compile_defines(),
                        sha256=candidate.sha256, kind=kind)
        try:
            spec, ev.compile = self.prepare(candidate)
        except CompileError as exc:
            ev.reason, ev.message = "compile_error", str(exc)
            ev.compile = {"log": exc.log, "lines": list(exc.lines)}
        except SignatureError as exc:
            ev.reason, ev.message = "signature_mismatch", str(exc)
        except CandidateError as exc:
            ev.reason = "static_rule" if static_rules.check(candidate.source) else "bad_candidate"
            ev.message = str(exc)
        else:
            self._run_cases(spec, ev, roles, time_cases, only)
            if ev.passed and self.options.sanitize and kind == "candidate":
                self._sanitize(candidate, ev)
        ev.seconds = time.perf_counter() - t0
        return ev

    def _sanitize(self, candidate: Candidate, ev: Evaluation) -> None:
        from .sanitizer import run_sanitizer

        results = run_sanitizer(self.task, candidate, seed=self.options.seed, arch=self.options.arch)
        ev.compile = dict(ev.compile or {})
        ev.compile["sanitizer"] = [{"tool": r.tool, "ok": r.ok, "message": r.message, "seconds": round(r.seconds, 2)}
                                   for r in results]
        bad = [r for r in results if not r.ok]
        if bad:
            ev.passed, ev.reason = False, "sanitizer"
            ev.message = f"compute-sanitizer {bad[0].tool}: {bad[0].message}"
            ev.score_us = None

    def retime(self, candidates: list[Candidate], rounds: int = 2) -> list[Evaluation]:
        """Measure candidates side by side: ``rounds`` interleaved passes over the performance
        cases (outputs still verified), samples pooled per case."""
        saved = self.options
        quick = GateOptions.quick(**{k: getattr(saved, k) for k in (
            "warmup", "reps", "flush_l2", "seed", "launch_timeout_s", "timing_timeout_s", "arch",
            "device", "plausibility", "plausible_margin")})
        quick.fresh_seeds = []
        quick.check_after_timing = True   # the re-timed launches are verified too
        runs: list[list[Evaluation]] = [[] for _ in candidates]
        try:
            self.options = quick
            for _ in range(rounds):
                for i, cand in enumerate(candidates):
                    runs[i].append(self.evaluate(cand, roles=("performance",)))
        finally:
            self.options = saved
        out = []
        for evs in runs:
            first = evs[0]
            if not all(e.passed for e in evs):
                out.append(next(e for e in evs if not e.passed))
                continue
            for case in first.cases:
                samples = [s for e in evs for s in e.case(case.name).timing.samples_us]
                case.timing = summarize(samples, flushed=case.timing.flushed)
                self._throughput(self.task.case(case.name), case)
            first.score_us = geomean([c.timing.median for c in first.cases])
            out.append(first)
        return out

    def evaluate_baseline(self, name: str, *, roles=("performance",)) -> Evaluation:
        """Time (and verify) a vendor baseline exactly like a candidate."""
        from .gpu.runner import KernelSpec

        ref = self.task.baselines[name]
        spec = KernelSpec(kind="python", label=f"baseline:{name}", module_path=str(ref.path), function=ref.function)
        t0 = time.perf_counter()
        ev = Evaluation(label=f"baseline:{name}", passed=False, kind="baseline")
        self._run_cases(spec, ev, roles, True)
        ev.seconds = time.perf_counter() - t0
        return ev

    def _run_cases(self, spec, ev: Evaluation, roles, time_cases: bool, only: set[str] | None = None) -> None:
        failed = False
        for case in self.task.cases:
            if case.role not in roles or (only is not None and case.name not in only):
                continue
            if failed and self.options.fail_fast:
                ev.cases.append(CaseResult(case.name, case.role, False, "skipped"))
                continue
            try:
                res = self._run_case(spec, case, time_cases and case.role == "performance")
            except ReferenceError_ as exc:
                res = CaseResult(case.name, case.role, False, "reference_error", str(exc))
            except EnvironmentProblem:
                raise
            ev.cases.append(res)
            self.progress(f"[kforge]   {ev.label}: {case.name} ({case.role}) "
                          + ("pass" if res.passed else res.reason)
                          + (f", median {res.timing.median:.2f} µs" if res.timing else ""))
            if not res.passed:
                failed = True
        failures = ev.failures()
        if failures:
            first = failures[0]
            ev.passed, ev.reason = False, first.reason
            ev.message = f"case {first.name}: {first.message}"
            return
        ev.passed, ev.reason = True, "passed"
        perf = [c.timing.median for c in ev.cases if c.role == "performance" and c.timing]
        if perf and len(perf) == len([c for c in ev.cases if c.role == "performance"]):
            ev.score_us = geomean(perf)

    def _call(self, spec, case: Case, opts) -> dict:
        w = self.worker()
        o = self.options
        try:
            return w.request("run", (spec, case.name, opts), first_timeout=max(60.0, o.launch_timeout_s),
                             launch_timeout=o.launch_timeout_s,
                             rest_timeout=o.timing_timeout_s if opts.time else o.launch_timeout_s,
                             what=f"running case {case.name}")
        except WorkerError as exc:
            if exc.reason in ("timeout", "worker_died") or exc.sticky:
                self._drop_worker()
            raise

    def _run_case(self, spec, case: Case, timed: bool) -> CaseResult:
        from .gpu.runner import RunOptions

        o = self.options
        res = CaseResult(case.name, case.role, False)
        if case.role == "holdout":   # fresh values every time a holdout runs
            seeds = [random.SystemRandom().randrange(1, 2**31)]
        else:
            seeds = [o.seed] + list(o.fresh_seeds)
        for i, seed in enumerate(seeds):
            res.seeds.append(seed)
            do_time = timed and i == 0
            opts = RunOptions(seed=seed, repeat=o.repeat_check, time=do_time, warmup=o.warmup,
                              reps=o.reps, flush=o.flush_l2, return_after_timing=o.check_after_timing)
            # the reference runs here while the candidate runs in its worker
            pending = self._pool.submit(self.expected, case, seed)
            try:
                out = self._call(spec, case, opts)
            except WorkerError as exc:
                res.reason, res.message, res.code = exc.reason, exc.message, exc.code
                return res
            finally:
                expected_or_error = pending.exception() or pending.result()
            if isinstance(expected_or_error, BaseException):
                raise expected_or_error
            expected = expected_or_error
            res.launch = out.get("launch", res.launch)
            problem = self._check_outputs(case, out, expected, res, draw=i)
            if problem:
                return res
            if do_time:
                res.timing = summarize(out["timing"]["samples_us"], flushed=out["timing"]["flushed"])
                self._throughput(case, res)
                if o.plausibility and self._implausible(res):
                    return res
        res.passed, res.reason = True, "passed"
        return res

    def _check_outputs(self, case: Case, out: dict, expected: dict, res: CaseResult, draw: int) -> bool:
        """Fill ``res`` with the first problem found; return True if there is one."""
        task = self.task
        if out.get("inputs_modified"):
            names = ", ".join(out["inputs_modified"])
            res.reason, res.message = "input_modified", f"const input(s) {names} changed by the kernel"
            return True

        def check(outputs: dict, stage: str) -> bool:
            checks = []
            for arg in task.outputs:
                chk = compare(arg.name, outputs[arg.name], expected[arg.name], arg.param.dtype,
                              task.tolerance_for(arg))
                checks.append(chk)
            res.outputs = [c.to_json() for c in checks]
            bad = [c for c in checks if not c.ok]
            if not bad:
                return False
            c = bad[0]
            if stage.startswith("after timed") or stage == "after timing":
                res.reason = "stale_after_timing"
            elif c.unwritten and c.unwritten == c.mismatches:
                res.reason = "unwritten"
            else:
                res.reason = "mismatch"
            res.message = f"draw {draw + 1} (seed {res.seeds[-1]}), {stage}: {c.summary()}"
            return True

        if "outputs" in out and check(out["outputs"], "first launch"):
            return True

        def same_as_first(outputs: dict) -> bool:
            # bit-for-bit the outputs that just passed: they pass too, without another full check
            return "outputs" in out and not outputs_identical(out["outputs"], outputs)

        if "outputs_repeat" in out:
            differing = outputs_identical(out["outputs"], out["outputs_repeat"])
            if differing:
                if task.nondeterministic:
                    if check(out["outputs_repeat"], "second launch"):
                        return True
                else:
                    res.reason = "nondeterministic"
                    res.message = (f"outputs {', '.join(differing)} differ bit-for-bit between two launches on "
                                   f"the same inputs (seed {res.seeds[-1]}): a race or uninitialised read; "
                                   "declare \"nondeterministic\": true in the manifest only for float atomics")
                    return True
        if ("outputs_after_timing" in out and not same_as_first(out["outputs_after_timing"])
                and check(out["outputs_after_timing"], "after timing")):
            return True
        if ("outputs_mid_timing" in out and not same_as_first(out["outputs_mid_timing"])
                and check(out["outputs_mid_timing"], f"after timed launch {out.get('mid_timing_launch', '?')}")):
            res.reason = "stale_after_timing"
            return True
        return False

    def _throughput(self, case: Case, res: CaseResult) -> None:
        flops, nbytes = self.task.cost(case)
        res.flops, res.bytes = flops, nbytes
        secs = res.timing.median * 1e-6
        if secs <= 0:
            return
        cal = self.calibrate()
        if nbytes is not None:
            res.gbps = nbytes / secs / 1e9
            if cal.get("bandwidth"):
                res.pct_peak_bw = 100.0 * nbytes / secs / cal["bandwidth"]
        if flops is not None:
            res.tflops = flops / secs / 1e12
            if cal.get("fp32_peak"):
                res.pct_peak_flops = 100.0 * flops / secs / cal["fp32_peak"]

    def _implausible(self, res: CaseResult) -> bool:
        cal = self.calibrate()
        secs = res.timing.median * 1e-6
        limits = []
        if res.bytes:
            limits.append(("bytes", res.bytes / (cal["bandwidth"] * self.options.plausible_margin)))
        if res.flops:
            limits.append(("flops", res.flops / (cal["tensor_peak"] * 1.05)))
        for what, floor in limits:
            if secs < floor:
                res.reason = "implausible"
                if what == "bytes":
                    res.message = (f"median {res.timing.median:.2f} µs moves {res.bytes:.3g} bytes at "
                                   f"{res.bytes / secs / 1e9:.0f} GB/s, above the measured copy bandwidth "
                                   f"{cal['bandwidth'] / 1e9:.0f} GB/s x{self.options.plausible_margin}: "
                                   "it cannot have read its inputs")
                else:
                    res.message = (f"median {res.timing.median:.2f} µs does {res.flops:.3g} FLOP at "
                                   f"{res.flops / secs / 1e12:.1f} TFLOP/s, above this GPU's tensor-core peak "
                                   f"{cal['tensor_peak'] / 1e12:.0f} TFLOP/s")
                return True
        return False

    def evaluate_many(self, candidates, *, roles=("correctness", "performance"), should_stop=lambda: False,
                      on_result=lambda i, ev: None):
        """One candidate after another on this gate's GPU (see :class:`~kernel_forge.gate_pool.GatePool`)."""
        from .gatelike import evaluate_in_turn
        return evaluate_in_turn(self, candidates, roles=roles, should_stop=should_stop, on_result=on_result)

    def precompile(self, candidates: list[Candidate]) -> None:
        """Compile candidates in parallel so that their evaluations hit the compile cache."""
        precompile(self, candidates)

    def profile(self, candidate: Candidate, cases: list[str]) -> dict:
        """A profiler summary of ``candidate`` on ``cases`` (see :mod:`kernel_forge.gatelike`)."""
        from .profile import profile_candidate
        return profile_candidate(self.task, candidate, cases, arch=self.arch, seed=self.options.seed,
                                 device=self.options.device)

    def ensure_gpu(self) -> None:
        """Probe the driver here, then start the worker (raises NoGPUError if there is no GPU)."""
        probe_gpu()
        self.worker()


KernelSpecT = object  # the runner's KernelSpec, imported lazily


def probe_gpu() -> None:
    """Raise NoGPUError unless a driver and GPU are present (imports the bindings)."""
    from .gpu import driver
    driver.probe()


__all__ = ["Gate", "GateOptions", "Worker", "WorkerError", "NoGPUError", "probe_gpu"]


def _precompile_one(gate: "Gate", candidate: Candidate) -> None:
    try:
        gate.prepare(candidate)
    except KForgeError:
        pass  # the evaluation reports it


def precompile(gate: "Gate", candidates: list[Candidate], threads: int = 4) -> None:
    """Compile candidates in parallel so their evaluations hit the compile cache."""
    if len(candidates) < 2:
        return
    gate.device_info() if gate.options.arch is None else None
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kforge-nvrtc") as pool:
        list(pool.map(lambda c: _precompile_one(gate, c), candidates))
