"""The gate: candidate → :class:`~kernel_forge.model.verdict.Evaluation`.

The candidate runs in a worker process (``spawn``, so Windows works too) that owns its own CUDA
context and only observes (:mod:`kernel_forge.model.worker_protocol`); every verdict is decided here,
by the check functions of :mod:`kernel_forge.gate.checks`.  Reference outputs are computed here, in
the parent (Python references) or in a separate reference worker (CUDA references), while the
candidate runs; they are sent to the worker once per (case, seed), compared on the GPU, and a
random sample of elements chosen after each run is re-checked here.  A hang is killed and
reported as ``timeout``; a sticky CUDA error ends that worker and the next request gets a fresh
one.  Candidate faults never raise past :meth:`Gate.evaluate`.

:class:`Gate` runs the cases and draws of an evaluation; what each part decides lives beside it:
the rules and the compile (:mod:`.prepare`), the worker process (:mod:`.worker`), the verdicts
(:mod:`.checks`), the elements re-checked (:mod:`.sampling`), a case's rates (:mod:`.throughput`),
side-by-side rounds (:mod:`.retime`), a CUDA reference (:mod:`.cuda_reference`) and dispatch
rules (:mod:`.dispatch_rule`).
"""
from __future__ import annotations

import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from kernel_forge.common import static_rules
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.model.candidate import Candidate
from kernel_forge.gate.gatelike import InTurn
from kernel_forge.gate.cuda_reference import reference_run
from kernel_forge.gate.checks import Finding, LoadContext, RunContext, before_launch, judge_draw
from kernel_forge.gate.prepare import check_candidate, compile_candidate
from kernel_forge.gate.preflight import KernelRefused
from kernel_forge.gate.retime import pooled_evaluation
from kernel_forge.gate.sampling import sample_indices
from kernel_forge.gate.throughput import fill_throughput
from kernel_forge.gate.worker import Worker, WorkerError
from kernel_forge.common.errors import CandidateError, CompileError, EnvironmentProblem, KForgeError, NoGPUError, ReferenceError_, SignatureError
from kernel_forge.model.references import check_finite
from kernel_forge.model.reference_process import reference_outputs
from kernel_forge.model.resources import case_resources
from kernel_forge.common.stats import geomean
from kernel_forge.model.task import Case, Task
from kernel_forge.model.verdict import CaseResult, Evaluation
from kernel_forge.model.worker_protocol import CALIBRATE, LOAD, RUN, SAMPLE, Expected, KernelSpec, Load, ModuleFacts, Observation, ResolvedLaunch, Run, RunPlan, Sample, resolve_launch


def _add(cost: dict, key: str, seconds: float) -> None:
    cost[key] = cost.get(key, 0.0) + seconds


class Gate(InTurn):
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
        self._compile_pool = ThreadPoolExecutor(max_workers=max(1, self.options.compile_threads),
                                                thread_name_prefix="kforge-nvrtc")
        self._compiles: dict[tuple[str, str], Future] = {}
        self._rng = random.SystemRandom()
        self.progress = lambda message: None   #: called with one line per finished case
        if self.options.sanitize:
            from kernel_forge.gate.sanitizer import find_sanitizer
            find_sanitizer()   # says clearly, before any work, that the tool is missing
        from kernel_forge.gpu.clock_offset import env_offset
        env_offset()           # a bad KFORGE_CLOCK_OFFSET_US is refused before any worker starts
        self.clock_offset: dict | None = None   #: the worker's launch offset (gpu/clock_offset.py)

    # -- worker management ------------------------------------------------------------------
    def worker(self) -> Worker:
        if self._worker is None or not self._worker.alive:
            if self._worker is not None:
                self._worker.close(kill=True)
                self.restarts += 1
            self._worker = Worker(self.task.path, self.options.device, resident_bytes=self.options.resident_bytes)
            offset = getattr(self._worker, "clock_offset", None)
            self.device = dict(self._worker.device)
            if offset:                    # recorded with the device in env.json
                self.device["clock_offset"] = offset
            if getattr(self._worker, "flush", ""):
                self.device["flush"] = self._worker.flush
            if offset and offset.get("warning") and offset != self.clock_offset:
                self.progress(f"[kforge] warning: {offset['warning']}")
            self.clock_offset = offset
        return self._worker

    def _drop_worker(self) -> None:
        if self._worker is not None:
            self._worker.close(kill=True)
            self._worker = None
            self.restarts += 1

    def close(self) -> None:
        for fut in self._compiles.values():
            fut.cancel()
        self._compiles.clear()
        self._compile_pool.shutdown(wait=True)
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
            cal = w.request(CALIBRATE, None, first_timeout=60, rest_timeout=60, what="calibrating")
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
    def prepare(self, candidate: Candidate) -> tuple[KernelSpec, dict]:
        """Static rules, signature, launch and compile (:mod:`.prepare`). Raises KForgeError subclasses."""
        launch = check_candidate(self.task, candidate)
        return compile_candidate(self.task, candidate, launch, self.arch)

    def precompile(self, candidates: list[Candidate]) -> None:
        """Start compiling ``candidates`` in the background, in order, so that the next ones are
        compiled while the current one is gated; :meth:`evaluate` takes the results."""
        if self.options.arch is None:
            self.device_info()      # the arch comes from the GPU
        from kernel_forge.model.dispatch_variants import variants
        candidates = variants(candidates)   # a dispatch rule (settings per shape): one compile per setting
        keys = [(cand.name, cand.sha256) for cand in candidates]
        for key in [k for k in self._compiles if k not in set(keys)]:
            self._compiles.pop(key).cancel()       # an earlier batch's leftovers (gated elsewhere)
        for key, cand in zip(keys, candidates):
            if key not in self._compiles:
                self._compiles[key] = self._compile_pool.submit(self.prepare, cand)

    def _prepared(self, candidate: Candidate, cost: dict) -> tuple[KernelSpec, dict]:
        t0 = time.perf_counter()
        fut = self._compiles.pop((candidate.name, candidate.sha256), None)
        try:
            return fut.result() if fut is not None and not fut.cancelled() else self.prepare(candidate)
        finally:
            _add(cost, "compile_s", time.perf_counter() - t0)

    # -- references -------------------------------------------------------------------------
    def expected(self, case: Case, seed: int) -> dict[str, np.ndarray]:
        key = (case.name, seed)
        if key not in self._expected:
            if len(self._expected) > 64:
                self._expected.clear()
            if self.task.reference.kind == "python":      # in the reference process, within its time limit
                self._expected[key] = reference_outputs(self.task, case, seed)
            else:
                self._expected[key] = self._cuda_reference(case, seed)
                check_finite(self.task, case.name, self._expected[key])
        return self._expected[key]

    def _cuda_reference(self, case: Case, seed: int) -> dict[str, np.ndarray]:
        from kernel_forge.model.candidate import load_candidate

        ref = load_candidate(self.task.reference.path)
        try:
            spec, _ = self.prepare(ref)
            launch = resolve_launch(spec.launch, case.vars, spec.defines)
        except KForgeError as exc:
            raise ReferenceError_(f"the CUDA reference {self.task.reference.path} is unusable: {exc}") from None
        if self._ref_worker is None or not self._ref_worker.alive:
            self._ref_worker = Worker(self.task.path, self.options.device)
        try:
            return reference_run(self._ref_worker, self.task, spec, case, seed, launch,
                                 max(60, self.options.launch_timeout_s))
        except WorkerError as exc:
            self._ref_worker.close(kill=True)
            self._ref_worker = None
            raise ReferenceError_(f"the CUDA reference failed on case {case.name!r}: {exc.reason}: {exc.message}") from None

    # -- evaluation -------------------------------------------------------------------------
    def evaluate(self, candidate: Candidate, *, roles: tuple[str, ...] = ("correctness", "performance"),
                 time_cases: bool = True, kind: str = "candidate", only: set[str] | None = None) -> Evaluation:
        if candidate.dispatch is not None:   # settings per shape: one evaluation per setting, merged (dispatch_rule.py)
            from kernel_forge.gate.dispatch_rule import evaluate_rule
            return evaluate_rule(self, self.task, candidate, roles=roles, time_cases=time_cases, kind=kind, only=only,
                                 fail_fast=self.options.fail_fast)
        t0 = time.perf_counter()
        ev = Evaluation(label=candidate.name, passed=False, defines=candidate.compile_defines(),
                        sha256=candidate.sha256, kind=kind)
        cost: dict = {}
        try:
            spec, ev.compile = self._prepared(candidate, cost)
        except CompileError as exc:
            ev.reason, ev.message = "compile_error", str(exc)
            ev.compile = {"log": exc.log, "lines": list(exc.lines)}
        except SignatureError as exc:
            ev.reason, ev.message = "signature_mismatch", str(exc)
        except CandidateError as exc:
            ev.reason = exc.reason if isinstance(exc, KernelRefused) else \
                "static_rule" if static_rules.check(candidate.source) else "bad_candidate"
            ev.message = str(exc)
        else:
            self._run_cases(spec, ev, roles, time_cases, only, cost)
            if ev.passed and self.options.sanitize and kind == "candidate":
                from kernel_forge.gate.sanitizer import sanitize
                sanitize(self.task, candidate, spec, ev, seed=self.options.seed)
        ev.seconds = time.perf_counter() - t0
        ev.cost = _rounded(cost)
        return ev

    def retime(self, candidates: list[Candidate], rounds: int = 2, *,
               check_after_timing: bool = True) -> list[Evaluation]:
        """Measure candidates side by side: ``rounds`` interleaved passes over the performance
        cases (outputs still verified, the timed ones too unless ``check_after_timing`` is off, as
        under --quick), samples pooled per case, each round's median kept (``round_medians``)."""
        saved = self.options
        quick = replace(saved, extra_draws=0, repeat_check=False, check_after_timing=check_after_timing,
                        fresh_seeds=[], fail_fast=False, sanitize=False)
        runs: list[list[Evaluation]] = [[] for _ in candidates]
        try:
            self.options = quick
            for _ in range(rounds):
                for i, cand in enumerate(candidates):
                    runs[i].append(self.evaluate(cand, roles=("performance",)))
        finally:
            self.options = saved
        return [pooled_evaluation(evs, lambda case: self._throughput(self.task.case(case.name), case)) for evs in runs]

    def evaluate_baseline(self, name: str, *, roles=("performance",)) -> Evaluation:
        """Time (and verify) a vendor baseline exactly like a candidate."""
        ref = self.task.baselines[name]
        spec = KernelSpec(kind="python", label=f"baseline:{name}", module_path=str(ref.path), function=ref.function)
        t0 = time.perf_counter()
        ev = Evaluation(label=f"baseline:{name}", passed=False, kind="baseline")
        cost: dict = {}
        self._run_cases(spec, ev, roles, True, None, cost)
        ev.seconds = time.perf_counter() - t0
        ev.cost = _rounded(cost)
        return ev

    def _request(self, op: str, payload, *, what: str, timed: bool = False, on_need=None):
        """One request to the candidate's worker; a worker that hung or died is replaced."""
        w = self.worker()
        o = self.options
        try:
            return w.request(op, payload, first_timeout=max(60.0, o.launch_timeout_s),
                             launch_timeout=o.launch_timeout_s,
                             rest_timeout=o.timing_timeout_s if timed else o.launch_timeout_s,
                             what=what, on_need=on_need)
        except WorkerError as exc:
            if exc.reason in ("timeout", "worker_died", "harness_error") or exc.sticky:
                self._drop_worker()     # a harness fault: start the next request from a fresh worker
            raise

    def _run_cases(self, spec: KernelSpec, ev: Evaluation, roles, time_cases: bool, only: set[str] | None,
                   cost: dict) -> None:
        cases = [c for c in self.task.cases if c.role in roles and (only is None or c.name in only)]
        launches: dict[str, ResolvedLaunch | None] = {}
        errors: dict[str, str] = {}
        facts: ModuleFacts | None = None
        load_error: WorkerError | None = None
        if spec.kind == "cuda" and cases:
            for case in cases:
                try:
                    launches[case.name] = resolve_launch(spec.launch, case.vars, spec.defines)
                except KForgeError as exc:
                    launches[case.name], errors[case.name] = None, str(exc)
            t0 = time.perf_counter()
            try:
                facts = self._request(LOAD, Load(spec, [l for l in launches.values() if l is not None]),
                                      what="loading the kernel")
            except WorkerError as exc:
                load_error = exc
            _add(cost, "load_s", time.perf_counter() - t0)
        failed = False
        for case in cases:
            if failed and self.options.fail_fast:
                ev.cases.append(CaseResult(case.name, case.role, False, "skipped"))
                continue
            res = CaseResult(case.name, case.role, False)
            try:
                if spec.kind != "cuda" or self._before_launch(res, ev, facts, launches.get(case.name),
                                                              errors.get(case.name, ""), load_error):
                    self._run_case(spec, case, time_cases and case.role == "performance", res,
                                   launches.get(case.name), cost)
            except ReferenceError_ as exc:
                res.passed, res.reason, res.message = False, "reference_error", str(exc)
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

    def _before_launch(self, res: CaseResult, ev: Evaluation, facts: ModuleFacts | None,
                       launch: ResolvedLaunch | None, launch_error: str, load_error: WorkerError | None) -> bool:
        """Module facts into the case's record, then the checks that run before any launch:
        True when the case may be launched."""
        res.launch = launch.to_json() if launch else None
        res.resources = case_resources(facts, launch, (ev.compile or {}).get("resources"))
        if facts is not None:
            res.module_state = {"globals": dict(facts.globals), "changed": {}}
        if load_error is not None:
            res.reason, res.message, res.code = load_error.reason, load_error.message, load_error.code
            return False
        found = before_launch(LoadContext(self.task, self.device_info(), facts, launch, launch_error))
        if found:
            res.reason, res.message = found.reason, found.message
            return False
        return True

    def _plan(self, case: Case, seed: int, launch: ResolvedLaunch | None, timed: bool) -> RunPlan:
        o = self.options
        return RunPlan(case=case.name, seed=seed, launch=launch, check=True, repeat=o.repeat_check, time=timed,
                       timing=o.timing, extra_warmup=self._rng.randrange(4), after_timing=o.check_after_timing,
                       snap_fraction=self._rng.random(), compare=o.compare, keep=o.compare == "gpu")

    def _run_case(self, spec: KernelSpec, case: Case, timed: bool, res: CaseResult,
                  launch: ResolvedLaunch | None, cost: dict) -> None:
        o = self.options
        if case.role == "holdout":   # fresh values every time a holdout runs
            seeds = [random.SystemRandom().randrange(1, 2**31)]
        else:
            seeds = [o.seed] + list(o.fresh_seeds)
        for i, seed in enumerate(seeds):
            res.seeds.append(seed)
            do_time = timed and i == 0
            finding, obs = self._draw(spec, case, seed, i, launch, do_time, res, cost)
            if obs is not None and res.module_state is not None:
                for stage, names in obs.globals_changed.items():
                    res.module_state["changed"][f"draw {i + 1}, {stage}"] = names
            if finding is not None:
                res.reason, res.message = finding.reason, finding.message
                return
        res.passed, res.reason = True, "passed"

    def _draw(self, spec: KernelSpec, case: Case, seed: int, draw: int, launch: ResolvedLaunch | None,
              timed: bool, res: CaseResult, cost: dict) -> tuple[Finding | None, Observation | None]:
        """One input draw of one case: run, sample, judge; the record's outputs and timing filled."""
        plan = self._plan(case, seed, launch, timed)
        pending = self._pool.submit(self.expected, case, seed)
        problems: list[BaseException] = []

        def on_need(need) -> Expected:
            t0 = time.perf_counter()
            try:
                return Expected(need.case, need.seed, pending.result())
            except BaseException as exc:  # noqa: BLE001 - raised below, once the worker has answered
                problems.append(exc)
                return Expected(need.case, need.seed, None)
            finally:
                _add(cost, "reference_s", time.perf_counter() - t0)

        t0 = time.perf_counter()
        try:
            obs: Observation = self._request(RUN, Run(spec, plan), what=f"running case {case.name}", timed=timed,
                                             on_need=on_need)
        except WorkerError as exc:
            if problems:
                raise problems[0]
            res.code = exc.code
            return Finding(exc.reason, exc.message), None
        finally:
            _add(cost, "runs_s", time.perf_counter() - t0)
            cost["runs"] = cost.get("runs", 0) + 1
        for part, secs in obs.seconds.items():
            _add(cost.setdefault("worker", {}), part, secs)
        t1 = time.perf_counter()
        expected = pending.result()            # raises ReferenceError_ for a broken reference
        _add(cost, "reference_s", time.perf_counter() - t1)
        ctx = RunContext(self.task, draw=draw, seed=seed, expected=expected, plausibility=self.options.plausibility,
                         plausible_margin=self.options.plausible_margin,
                         shapes={a.name: self.task.shape(a, case) for a in self.task.outputs})
        t2 = time.perf_counter()
        if any(s.kept for s in obs.stages):
            ctx.sample_indices = sample_indices(obs, ctx.shapes, self._rng.getrandbits(63), self.options.sample_size)
            try:
                ctx.sample = self._request(SAMPLE, Sample(ctx.sample_indices), what=f"sampling case {case.name}")
            except WorkerError as exc:
                res.code = exc.code
                return Finding(exc.reason, exc.message), obs
            _add(cost, "sample_s", time.perf_counter() - t2)
        t3 = time.perf_counter()
        finding = judge_draw(self.task, case, obs, ctx, res, self.calibrate)
        _add(cost, "checks_s", time.perf_counter() - t3)
        return finding, obs

    def _throughput(self, case: Case, res: CaseResult) -> None:
        fill_throughput(self.task, case, res, self.calibrate)

    def profile(self, candidate: Candidate, cases: list[str]) -> dict:
        """A profiler summary of ``candidate`` on ``cases`` (see :mod:`kernel_forge.gate.gatelike`)."""
        if candidate.dispatch is not None:   # each case profiled with the setting its rule picks
            from kernel_forge.gate.dispatch_rule import profile_rule
            return profile_rule(self, self.task, candidate, cases)
        from kernel_forge.gate.profiler import profile_candidate
        return profile_candidate(self.task, candidate, cases, arch=self.arch, seed=self.options.seed,
                                 device=self.options.device)

    def ensure_gpu(self) -> None:
        """Probe the driver here, then start the worker (raises NoGPUError if there is no GPU)."""
        probe_gpu()
        self.worker()


def _rounded(cost: dict) -> dict:
    out = {}
    for k, v in cost.items():
        out[k] = _rounded(v) if isinstance(v, dict) else (round(v, 6) if isinstance(v, float) else v)
    return out


def open_gate(task: Task, options: GateOptions):
    """The real gate, its GPU probed (raises NoGPUError without one); closed again if the probe fails."""
    gate = Gate(task, options)
    try:
        gate.ensure_gpu()
    except BaseException:
        gate.close()
        raise
    return gate


def probe_gpu() -> None:
    """Raise NoGPUError unless a driver and GPU are present (imports the bindings)."""
    from kernel_forge.gpu import driver
    driver.probe()


__all__ = ["Gate", "GateOptions", "NoGPUError", "open_gate", "probe_gpu"]
