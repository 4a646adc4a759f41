"""Test doubles for the optimisation loop on machines without a GPU.

:class:`ScriptedGate` implements the gate interface the loop uses (``evaluate``, ``retime``,
``evaluate_baseline``, ``device_info``, ``calibrate``, ``close``).  Its verdicts are scripted by
comments in the candidate source, so a test states what each candidate "does" next to its code::

    // fake: pass 200          passes; score (geomean of the performance medians) 200 µs
    // fake: mismatch 150      its first case fails (reason `mismatch`, any per-case reason works);
                               the other cases pass, as the real gate runs them all
    // fake: compile_error 0   fails before any case runs (also signature_mismatch, static_rule, ...)
    // fake-holdout: fail      every hidden (holdout) case fails with fresh values
    // fake-holdout: flaky     the first holdout evaluation passes, later ones fail
    // fake-opt: BLOCK=256     optimum of a tunable: each step of 2x away costs 10 % (default BLOCK=256)
    // fake-opt@large: BLOCK=1024   the optimum on case ``large`` only (settings per shape)

A candidate with a dispatch rule is split and merged as the real gate does it
(:func:`kernel_forge.gate.dispatch_rule.evaluate_rule`); ``evaluate(..., only=...)`` runs only those cases.

A source without ``// fake:`` passes at :data:`DEFAULT_US` (the task's initial kernel).  Every
case result looks like the real gate's: seeds, per-output checks, a resolved launch, timing
with samples whose median is exact, bytes/FLOPs, GB/s and % of peak.  Performance cases are
scaled by their byte (or FLOP) count so that the score is exactly the scripted number.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

from kernel_forge.model.candidate import Candidate
from kernel_forge.common.errors import KForgeError
from kernel_forge.gate.gatelike import InTurn
from kernel_forge.gpu.driver import DeviceInfo
from kernel_forge.proposers.base import Exhausted, ModelCall, Proposal, ProposalRequest, ProposalResult
from kernel_forge.common.stats import geomean, summarize
from kernel_forge.model.verdict import REASONS, CaseResult, Evaluation

DEFAULT_US = 600.0
#: reasons the real gate gives before any case runs (no cases in the evaluation)
EARLY = {"bad_candidate", "static_rule", "signature_mismatch", "compile_error"}

_FAKE = re.compile(r"^\s*//\s*fake:\s*(\w+)\s+([0-9.]+)\s*$", re.M)
_HOLDOUT = re.compile(r"^\s*//\s*fake-holdout:\s*(\w+)\s*$", re.M)
_OPT = re.compile(r"^\s*//\s*fake-opt:\s*(.+?)\s*$", re.M)
_OPT_CASE = re.compile(r"^\s*//\s*fake-opt@(\w+):\s*(.+?)\s*$", re.M)

H200 = DeviceInfo(ordinal=0, name="NVIDIA H200 (scripted)", cc=(9, 0), sms=132, clock_khz=1_980_000,
                  mem_clock_khz=2_619_000, bus_width_bits=6144, memory_bytes=150_121_545_728,
                  l2_bytes=62_914_560, max_threads_per_block=1024, max_block=(1024, 1024, 64),
                  max_grid=(2_147_483_647, 65535, 65535), max_smem_per_block=49152,
                  max_smem_per_block_optin=232_448, driver_version="13.0")


class ScriptedGate(InTurn):
    """A gate whose verdicts come from ``// fake:`` comments (see the module docstring).

    ``interrupt`` = ``{"evaluate": 3}`` raises KeyboardInterrupt at the 3rd ``evaluate`` call
    (``"retime"`` counts retime calls), once, as a kill would.  ``calls`` records every call.
    ``profiler=True`` answers :meth:`profile` like a working ncu would (a few metrics per case,
    derived from the scripted time), otherwise it says no profiler is available.
    """

    def __init__(self, task, *, noise: float = 0.002, reps: int = 31, baseline_us: float = 250.0,
                 interrupt: dict[str, int] | None = None, seed: int = 0, profiler: bool = False):
        if reps % 2 == 0:
            raise ValueError("reps must be odd so the median is one sample")
        self.task = task
        self.noise, self.reps, self.baseline_us = noise, reps, baseline_us
        self.interrupt = dict(interrupt or {})
        self.seed = seed
        self.profiler = profiler
        self.counts: Counter = Counter()
        self.holdout_runs: Counter = Counter()       # per source hash
        self.calls: list[tuple] = []
        self.closed = False
        self._holdout_seed = 7001
        self.device = H200.to_json()
        self.calibration = {"copy_bytes": 1 << 30, "copy_us": 560.0, "bandwidth": 2.0 * (1 << 30) / 560e-6,
                            "fp32_peak": self.device["fp32_peak"], "tensor_peak": self.device["tensor_peak"],
                            "theoretical_bandwidth": self.device["theoretical_bandwidth"]}
        perf = [c for c in task.cases if c.role == "performance"]
        weights = {c.name: self._weight(c) for c in perf}
        g = geomean(weights.values()) if weights else 1.0
        self.scale = {k: v / g for k, v in weights.items()}   # geomean of the scales is 1

    # -- the script -----------------------------------------------------------------------
    #: time every case with ``time_us(cand, case)`` (else only sources with a ``// fake-opt@CASE:``)
    times_each_case = False

    def _weight(self, case) -> float:
        flops, nbytes = self.task.cost(case)
        return nbytes or flops or 1.0

    @staticmethod
    def script(source: str) -> tuple[str, float]:
        m = _FAKE.search(source)
        if not m:
            return "passed", DEFAULT_US
        reason = "passed" if m.group(1) == "pass" else m.group(1)
        if reason not in REASONS:
            raise ValueError(f"// fake: unknown reason {reason!r}")
        return reason, float(m.group(2))

    @staticmethod
    def optimum(source: str, case: str | None = None) -> dict[str, float]:
        opt = {"BLOCK": 256.0}
        found = list(_OPT.finditer(source)) + [m for m in _OPT_CASE.finditer(source) if m.group(1) == case]
        for m in found:
            for item in m.group(m.lastindex).split():
                k, _, v = item.partition("=")
                opt[k] = float(v)
        return opt

    def time_us(self, cand: Candidate, case: str | None = None) -> float:
        """The scripted score of this candidate with its defines (tunables move it off the optimum,
        which ``// fake-opt@CASE:`` may set for one case)."""
        _, t = self.script(cand.source)
        for name, best in self.optimum(cand.source, case).items():
            v = cand.defines.get(name)
            if v is not None and v > 0:
                t *= 1.0 + 0.1 * abs(math.log2(v / best))
        return t

    def _tick(self, what: str) -> None:
        self.counts[what] += 1
        if self.interrupt.get(what) == self.counts[what]:
            del self.interrupt[what]
            raise KeyboardInterrupt(f"scripted kill at {what} #{self.counts[what]}")

    # -- case results ---------------------------------------------------------------------
    def _launch(self, cand: Candidate, case) -> dict | None:
        launch = cand.launch or self.task.launch
        if launch is None:
            return None
        grid, block, smem = launch.resolve({**case.vars, **cand.defines})
        return {"grid": list(grid), "block": list(block), "shared_mem": smem}

    def _outputs(self, case, bad: int = 0) -> list[dict]:
        out = []
        for i, arg in enumerate(self.task.outputs):
            total = math.prod(self.task.shape(arg, case))
            wrong = min(bad, total) if i == 0 else 0
            first = [{"index": [3], "actual": 1.5, "expected": -0.25}] if wrong else []
            out.append({"name": arg.name, "ok": not wrong, "total": total, "mismatches": wrong, "unwritten": 0,
                        "nonfinite_mismatches": 0, "max_abs": 1.75 if wrong else 0.0,
                        "max_rel": 7.0 if wrong else 1.2e-7, "first": first, "shape_error": None})
        return out

    def _case(self, cand: Candidate, case, *, fail: str | None, t_us: float, timed: bool) -> CaseResult:
        if case.role == "holdout":
            seeds = [self._holdout_seed]
            self._holdout_seed += 1
        else:
            seeds = [self.seed, 1_234_567]
        res = CaseResult(case.name, case.role, True, seeds=seeds)
        try:
            res.launch = self._launch(cand, case)
        except KForgeError as exc:      # a launch expression that does not evaluate: as the real gate
            res.passed, res.reason, res.message, res.seeds = False, "launch_config", str(exc), seeds[:1]
            return res
        flops, nbytes = self.task.cost(case)
        if fail:
            res.passed, res.reason = False, fail
            res.seeds = seeds[:1]
            res.outputs = self._outputs(case, bad=7)
            shown = ", ".join(f"{k}={v}" for k, v in case.vars.items())
            res.message = (f"draw 1 (seed {seeds[0]}), first launch ({shown}): "
                           + self._outputs(case, bad=7)[0]["name"] + f": 7 elements differ ({fail})")
            if fail in ("crash", "launch_failed"):
                res.code = "CUDA_ERROR_ILLEGAL_ADDRESS"
            return res
        res.outputs = self._outputs(case)
        if timed:
            # an optimum of its own on some case (a subclass may time every case on its own)
            per_case = self.times_each_case or _OPT_CASE.search(cand.source) is not None
            median = (self.time_us(cand, case.name) if per_case else t_us) * self.scale[case.name]
            half = self.reps // 2
            samples = [median * (1.0 + self.noise * (k - half) / half) for k in range(self.reps)]
            res.timing = summarize(samples, flushed=True)
            res.flops, res.bytes = flops, nbytes
            secs = res.timing.median * 1e-6
            if nbytes is not None:
                res.gbps = nbytes / secs / 1e9
                res.pct_peak_bw = 100.0 * nbytes / secs / self.calibration["bandwidth"]
            if flops is not None:
                res.tflops = flops / secs / 1e12
                res.pct_peak_flops = 100.0 * flops / secs / self.calibration["fp32_peak"]
        return res

    def _evaluate(self, cand: Candidate, roles, *, kind: str = "candidate", only=None) -> Evaluation:
        if cand.dispatch is not None:   # settings per shape: split and merged as the real gate does
            from kernel_forge.gate.dispatch_rule import evaluate_rule
            return evaluate_rule(self, self.task, cand, roles=roles, kind=kind, only=only)
        reason, _ = self.script(cand.source)
        t_us = self.time_us(cand)
        ev = Evaluation(label=cand.name, passed=False, defines=cand.compile_defines(), sha256=cand.sha256,
                        kind=kind, seconds=0.05)
        if reason in EARLY:
            ev.reason = reason
            ev.message = f"{cand.name}:5: scripted {reason}"
            if reason == "compile_error":
                ev.compile = {"log": f"{cand.name}(5): error: identifier \"nope\" is undefined", "lines": [5]}
            return ev
        ev.compile = {"arch": self.device["arch"], "options": ["--std=c++17"], "nvrtc": "13.0", "seconds": 0.01,
                      "cached": True, "log": "", "resources": {"registers": 16}, "cubin_bytes": 4096}
        failed_first = False
        hold = _HOLDOUT.search(cand.source)
        for case in self.task.cases:
            if case.role not in roles or (only is not None and case.name not in only):
                continue
            fail = None
            if case.role == "holdout":
                mode = hold.group(1) if hold else "pass"
                runs = self.holdout_runs[cand.sha256]
                if mode == "fail" or (mode == "flaky" and runs >= 1):
                    fail = "mismatch"
            elif reason != "passed" and not failed_first:
                fail, failed_first = reason, True
            ev.cases.append(self._case(cand, case, fail=fail, t_us=t_us, timed=case.role == "performance"))
        if "holdout" in roles:
            self.holdout_runs[cand.sha256] += 1
        bad = ev.failures()
        if bad:
            ev.reason = bad[0].reason
            ev.message = f"case {bad[0].name}: {bad[0].message}"
            return ev
        ev.passed, ev.reason = True, "passed"
        perf = [c.timing.median for c in ev.cases if c.role == "performance"]
        if perf:
            ev.score_us = geomean(perf)
        return ev

    # -- the gate interface ---------------------------------------------------------------
    def evaluate(self, candidate: Candidate, *, roles=("correctness", "performance"), kind: str = "candidate",
                 only=None, **_kw) -> Evaluation:
        self.calls.append(("evaluate", candidate.name, tuple(roles)))
        self._tick("evaluate")
        if candidate.dispatch is None and only is not None:
            self.calls.append(("variant", candidate.name, tuple(sorted(only)), dict(candidate.defines)))
        return self._evaluate(candidate, tuple(roles), only=only)

    def retime(self, candidates: list[Candidate], rounds: int = 2) -> list[Evaluation]:
        self.calls.append(("retime", tuple(c.name for c in candidates), rounds))
        self._tick("retime")
        out = []
        for c in candidates:
            ev = self._evaluate(c, ("performance",))
            for case in ev.cases:   # pooled samples of `rounds` interleaved passes
                if case.timing is not None:
                    case.timing = summarize(list(case.timing.samples_us) * rounds, flushed=True,
                                            round_medians=[case.timing.median] * rounds)
            out.append(ev)
        return out

    def evaluate_baseline(self, name: str, **_kw) -> Evaluation:
        self.calls.append(("baseline", name))
        if name not in self.task.baselines:
            raise KForgeError(f"no baseline {name!r}")
        fake = Candidate(source=f"// baseline {name}\n// fake: pass {self.baseline_us}\n", name=f"baseline:{name}")
        ev = self._evaluate(fake, ("performance",), kind="baseline")
        ev.compile, ev.defines, ev.sha256 = None, {}, ""
        return ev

    def device_info(self) -> dict:
        return self.device

    def calibrate(self) -> dict:
        return self.calibration

    def precompile(self, candidates: list[Candidate]) -> None:
        self.calls.append(("precompile", tuple(c.name for c in candidates)))

    def profile(self, candidate: Candidate, cases: list[str]) -> dict:
        self.calls.append(("profile", candidate.name, tuple(cases)))
        if not self.profiler:
            return {"available": False, "reason": "the scripted gate has no profiler", "tool": "ncu",
                    "seconds": 0.0, "cases": {}}
        dram = round(min(95.0, 100.0 * 200.0 / self.time_us(candidate)), 1)   # 200 µs is 100 % of DRAM
        return {"available": True, "reason": "", "tool": "ncu (scripted)", "seconds": 1.5,
                "cases": {name: {"dram_pct": dram, "l2_pct": round(dram / 2, 1), "sm_pct": 12.0,
                                 "achieved_occupancy": 0.8, "stalls": ["long_scoreboard", "lg_throttle"]}
                          for name in cases}}

    def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------- kernels and proposal folders

VECTOR_ADD_BODY = ('extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)\n'
                   "{\n"
                   "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "    if (i < n) {\n"
                   "        c[i] = a[i] + b[i];\n"
                   "    }\n"
                   "}\n")


def vector_add(fake: str | None = None, *, holdout: str | None = None, header: str = "", note: str = "",
               variant: str | None = None) -> str:
    """A vector_add kernel source carrying the given script comments (and kforge header).

    The loop de-duplicates kernels by their source without comments, so the script is also
    written as code (``#define FAKE_SCRIPT "..."``): kernels scripted differently are different
    kernels, the same script twice is the same kernel.  ``variant`` adds to that line (two
    kernels with one script that are still different); ``note`` is a comment only."""
    lines = [header.rstrip("\n")] if header else []
    if note:
        lines.append(f"// {note}")
    if fake:
        lines.append(f"// fake: {fake}")
    if holdout:
        lines.append(f"// fake-holdout: {holdout}")
    script = " ".join(x for x in (fake, holdout and f"holdout {holdout}", variant) if x)
    if script:
        lines.append(f'#define FAKE_SCRIPT "{script}"')
    return "\n".join(lines + [VECTOR_ADD_BODY])


def write_proposals(folder: str | Path, sources: dict[str, str] | list[str]) -> Path:
    """Write a replay folder: ``{"01_fast.cu": source, ...}`` or a list (named 01.cu, 02.cu, ...)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    items = sources.items() if isinstance(sources, dict) else ((f"{i:02d}.cu", s) for i, s in enumerate(sources, 1))
    for name, text in items:
        (folder / name).write_text(text, encoding="utf-8")
    return folder


class ScriptedProposer:
    """A proposer that answers each request with the next of ``answers`` and records the requests.

    An answer is a list of sources or :class:`Proposal` s, a whole :class:`ProposalResult`
    (calls, errors, ``unreachable``), or a function of the request returning either.  Past the
    last answer it raises :class:`Exhausted`."""

    needs_prompt = True

    def __init__(self, answers, name: str = "scripted"):
        self.answers = list(answers)
        self.name = name
        self.requests: list[ProposalRequest] = []

    def propose(self, request: ProposalRequest) -> ProposalResult:
        self.requests.append(request)
        if not self.answers:
            raise Exhausted(f"all scripted answers given ({len(self.requests) - 1})")
        answer = self.answers.pop(0)
        if callable(answer):
            answer = answer(request)
        result = answer if isinstance(answer, ProposalResult) else ProposalResult(
            proposals=[p if isinstance(p, Proposal) else Proposal(source=p) for p in answer])
        for p in result.proposals:
            p.proposer = p.proposer or self.name
        return result


def model_call(input_tokens: int = 1000, output_tokens: int = 500, cost_usd: float = 0.01,
               error: str | None = None) -> ModelCall:
    """A ModelCall record as a provider would return it (no network)."""
    return ModelCall(provider="openai", model="scripted-model", request={"messages": []},
                     response=None if error else {"choices": []}, input_tokens=input_tokens,
                     output_tokens=output_tokens, cost_usd=cost_usd, error=error)
