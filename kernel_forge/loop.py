"""The plain loop: propose → gate → record → feed back, until a stop rule fires.

One screen of logic in :meth:`Optimizer.run`; everything it writes goes through
:class:`~kernel_forge.evidence.RunDir` as it happens, and the final summary is written in a
``finally`` block, so Ctrl-C or a kill leaves a run that ``--resume`` continues.
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field

from . import __version__
from .candidate import Candidate, Launch, parse_candidate
from .errors import CandidateError, KForgeError
from .evidence import RunDir
from .prompts import PromptAttempt, build_prompt, system_prompt
from .proposers.base import Exhausted, Proposal, ProposalRequest
from .proposers.tune import configurations_to_try, neighbours
from .stats import noise_band
from .task import Task
from .verdict import Evaluation


@dataclass
class LoopConfig:
    """Stop rules and search settings of ``kforge optimize`` (every field is a CLI option)."""

    max_iterations: int = 7            #: iterations (each asks for `candidates` proposals)
    candidates: int = 1                #: proposals per iteration, gated one after another
    budget_usd: float | None = None    #: stop when model spending reaches this
    max_tokens: int | None = None      #: stop when input+output tokens reach this
    time_limit_s: float | None = None  #: stop after this much wall time
    patience: int | None = None        #: stop after this many iterations without improvement
    target_speedup: float | None = None  #: stop once best is this much faster than the initial kernel
    tune_budget: int = 24              #: most settings gated per proposal that declares tunables
    refine: bool = True                #: after tuning a proposal, also try neighbours of its best setting
    history_in_prompt: int = 5         #: earlier correct kernels shown to the model
    failures_in_prompt: int = 3        #: recent failures summarised in the prompt
    crossover_every: int = 3           #: every Nth iteration offers two parents to combine (0: never)
    retime_rounds: int = 2             #: interleaved re-measurement rounds before the best changes
    min_improvement: float = 0.01      #: the least relative gain that can move the best
    hints: str = ""                    #: extra text for the model
    seed: int = 0                      #: seed of the loop's own choices (sampling, crossover)

    def to_json(self) -> dict:
        return asdict(self)


class StopRun(Exception):
    """A stop rule fired; ``reason`` is recorded in the summary."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Attempt:
    id: str
    iteration: int
    proposer: str
    label: str = ""
    parent: str | None = None
    rationale: str = ""
    source_file: str = ""
    sha256: str = ""
    defines: dict = field(default_factory=dict)
    launch: dict | None = None
    tunables: dict = field(default_factory=dict)
    status: str = "pending"           # pending | passed | failed
    reason: str = ""
    message: str = ""
    score_us: float | None = None
    evaluation: dict | None = None
    holdout: dict | None = None
    retimed: dict | None = None
    best: bool = False
    model_calls: list[str] = field(default_factory=list)
    created: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Attempt":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def candidate_from_proposal(p: Proposal, name: str) -> Candidate:
    """A proposal's source plus its launch/tunables as one candidate (header wins if both)."""
    cand = parse_candidate(p.source, name=name)
    launch = cand.launch
    if launch is None and p.launch:
        launch = Launch(tuple(p.launch["grid"]), tuple(p.launch["block"]), p.launch.get("shared_mem", 0))
    tunables = dict(cand.tunables)
    defines = dict(cand.defines)
    for k, values in (p.tunables or {}).items():
        if k not in tunables:
            tunables[k] = tuple(values)
            defines.setdefault(k, values[0])
    return Candidate(source=cand.source, name=name, launch=launch, tunables=tunables, defines=defines,
                     constraints=cand.constraints)


class Optimizer:
    """Owns the run's state; ``gate`` and ``proposer`` are swapped by interface (tests use fakes)."""

    def __init__(self, task: Task, gate, proposer, run: RunDir, config: LoopConfig,
                 progress=lambda msg: None, run_meta: dict | None = None):
        self.task, self.gate, self.proposer, self.run_dir, self.config = task, gate, proposer, run, config
        self.progress = progress
        self.meta = run_meta or {}
        self.attempts: list[Attempt] = []
        self.best: Attempt | None = None
        self.initial: Attempt | None = None
        self.baselines: dict[str, dict] = {}
        self.iteration = 0
        self.since_improvement = 0
        self.tokens = {"input": 0, "output": 0}
        self.cost_usd = 0.0
        self.per_model: dict[str, dict] = {}
        self.started = time.time()
        self.elapsed_before = 0.0
        self.stop_reason = ""
        self.settled = True      # False between recording an iteration's proposals and deciding its best
        self.rng = random.Random(config.seed)

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> dict:
        self.progress(f"[kforge] run {self.run_dir.path} — task {self.task.name}, proposer {self.proposer.name}")
        try:
            self._start()
            while True:
                pending = self._pending()
                if pending and self._time_up():
                    raise StopRun("time_limit")     # left pending: --resume with a longer limit gates them
                if pending or not self.settled:
                    # recorded before a kill: gate what is pending without asking again, then
                    # decide the best over the whole iteration (its gated attempts included)
                    if pending:
                        self.iteration = pending[0].iteration
                    batch = [a for a in self.attempts if a.iteration == self.iteration and a.proposer != "initial"]
                else:
                    self._check_stop()
                    self.iteration += 1
                    batch = self._ask()
                self._gate_batch(batch)
                self._iteration_line()
        except StopRun as stop:
            self.stop_reason = stop.reason
        except Exhausted as exc:
            self.stop_reason = f"proposer_exhausted: {exc}"
        except KeyboardInterrupt:
            self.stop_reason = "interrupted"
            self._write_history()
            raise
        finally:
            if not self.stop_reason:
                self.stop_reason = "error"
            summary = self._finish()
        return summary

    # -- start / resume ---------------------------------------------------------------------
    def _start(self) -> None:
        hist = self.run_dir.read_json("history.json")
        if hist:
            self.attempts = [Attempt.from_json(a) for a in hist["attempts"]]
            self.baselines = hist.get("baselines", {})
            st = hist.get("state", {})
            self.iteration = st.get("iteration", 0)
            self.since_improvement = st.get("since_improvement", 0)
            self.tokens = st.get("tokens", self.tokens)
            self.cost_usd = st.get("cost_usd", 0.0)
            self.per_model = st.get("per_model", {})
            self.elapsed_before = st.get("elapsed_s", 0.0)
            self.settled = st.get("settled", True)
            self.initial = next((a for a in self.attempts if a.proposer == "initial"), None)
            bests = [a for a in self.attempts if a.best]
            self.best = bests[-1] if bests else self.initial
            self.progress(f"[kforge] resuming at iteration {self.iteration} with {len(self.attempts)} attempts recorded")
        if self.initial is None or self.initial.status != "passed":
            self._evaluate_initial()
        if not self.baselines:
            for name in self.task.baselines:
                self.progress(f"[kforge] timing vendor baseline {name}")
                ev = self.gate.evaluate_baseline(name)
                self.baselines[name] = ev.to_json(with_samples=False)
            self._write_history()

    def _evaluate_initial(self) -> None:
        a = self.initial
        if a is None:
            source = self.task.initial.read_text(encoding="utf-8")
            a = self._record_proposal(Proposal(source=source, rationale="the task's initial kernel",
                                               proposer="initial", label=self.task.initial.name), iteration=0)[0]
            self.initial = a
        ev = self._gate_attempt(a, roles=("correctness", "performance", "holdout"))
        if not ev.passed:
            self._write_history()
            raise KForgeError(f"the task's initial kernel fails the gate ({ev.reason}): {ev.message}",
                              hint="fix the initial kernel or the manifest first: kforge eval MANIFEST")
        a.best = True
        self.best = a
        self._write_history()

    # -- proposing --------------------------------------------------------------------------
    def _pending(self) -> list[Attempt]:
        return [a for a in self.attempts if a.status == "pending"]

    def _ask(self) -> list[Attempt]:
        request = ProposalRequest(system=system_prompt(), prompt=self._prompt(), n=self.config.candidates,
                                  iteration=self.iteration)
        try:
            result = self.proposer.propose(request)
        except BaseException:
            self.iteration -= 1          # nothing was recorded: this iteration did not happen
            raise
        call_files = []
        for call in result.calls:
            idx = self.run_dir.next_model_index()
            name = f"model-{idx:03d}.json"
            self.run_dir.write_json(name, {"index": idx, "iteration": self.iteration, **asdict(call)})
            call_files.append(name)
            self.tokens["input"] += call.input_tokens
            self.tokens["output"] += call.output_tokens
            self.cost_usd += call.cost_usd
            m = self.per_model.setdefault(f"{call.provider}:{call.model}",
                                          {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0})
            m["calls"] += 1
            m["input_tokens"] += call.input_tokens
            m["output_tokens"] += call.output_tokens
            m["cost_usd"] += call.cost_usd
        for err in result.errors:
            self.progress(f"[kforge]   proposer error: {err}")
        batch = []
        for p in result.proposals:
            p.parent = p.parent or (self.best.id if self.best else None)
            batch.extend(self._record_proposal(p, self.iteration, call_files))
        self.settled = False
        self._write_history()
        if not batch and result.errors and not result.proposals:
            self.progress("[kforge]   no usable proposal this iteration")
        return batch

    def _record_proposal(self, p: Proposal, iteration: int, calls: list[str] = ()) -> list[Attempt]:
        """Write a proposal's source; expand declared tunables into one attempt per setting."""
        base_id = f"a{len(self.attempts):04d}"
        if not p.label:   # model proposals: a label of their own, so their settings group and refine apart
            p.label = base_id
        try:
            cand = candidate_from_proposal(p, name=f"{base_id}.cu")
        except CandidateError as exc:
            a = Attempt(id=base_id, iteration=iteration, proposer=p.proposer, label=p.label, parent=p.parent,
                        rationale=p.rationale, status="failed", reason="bad_candidate", message=str(exc),
                        model_calls=list(calls))
            a.source_file = f"attempts/{a.id}.cu"
            self.run_dir.write_text(a.source_file, p.source)
            self.attempts.append(a)
            return []
        configs = [cand.defines]
        if cand.tunables:
            configs = configurations_to_try(cand, self.config.tune_budget,
                                            seed=self.config.seed + iteration) or [cand.defines]
        out = []
        for d in configs:
            c = cand.with_defines(d)
            a = Attempt(id=f"a{len(self.attempts):04d}", iteration=iteration, proposer=p.proposer, label=p.label,
                        parent=p.parent, rationale=p.rationale, defines=dict(d),
                        launch=c.launch.to_json() if c.launch else None,
                        tunables={k: list(v) for k, v in c.tunables.items()}, model_calls=list(calls))
            a.source_file = f"attempts/{a.id}.cu"
            rendered = c.render()
            a.sha256 = c.sha256
            self.run_dir.write_text(a.source_file, rendered)
            self.attempts.append(a)
            out.append(a)
        return out

    def _candidate(self, a: Attempt) -> Candidate:
        text = (self.run_dir.path / a.source_file).read_text(encoding="utf-8")
        return parse_candidate(text, name=f"{a.id}.cu")

    # -- gating -----------------------------------------------------------------------------
    def _gate_batch(self, batch: list[Attempt]) -> None:
        """Gate the batch's pending attempts, refine tuned ones, then decide whether the best moves.
        On resume ``batch`` also holds the iteration's attempts gated before the kill."""
        todo = [a for a in batch if a.status == "pending"]
        if todo:
            self.gate.precompile([self._candidate(a) for a in todo])
        for a in todo:
            if self._time_up():
                break            # the rest stay pending; the best is still settled below
            self._gate_attempt(a)
        improved = False
        if batch:
            if not self._time_up():
                self._refine(batch)
            improved = self._maybe_move_best([a for a in batch if a.status == "passed"])
            improved = improved or any(a.best for a in batch)   # a resumed batch may have moved it already
        self.since_improvement = 0 if improved else self.since_improvement + 1
        self.settled = True
        self._write_history()

    def _refine(self, batch: list[Attempt]) -> None:
        """Try the neighbours of the best setting of each tuned proposal (one step, not gated before)."""
        if not self.config.refine:
            return
        groups: dict[str, list[Attempt]] = {}
        ids = {a.id for a in batch}
        for a in batch:
            if a.parent in ids:   # already a neighbour (a resumed batch holds its refinements)
                continue
            if a.tunables and a.status == "passed":
                groups.setdefault(a.label + (a.parent or ""), []).append(a)
        tried = {tuple(sorted(x.defines.items())) + (x.label,) for x in self.attempts}
        extra = []
        for members in groups.values():
            top = min(members, key=lambda x: x.score_us)
            cand = self._candidate(top)
            for d in neighbours(cand, top.defines):
                if tuple(sorted(d.items())) + (top.label,) in tried:
                    continue
                c = cand.with_defines(d)
                a = Attempt(id=f"a{len(self.attempts):04d}", iteration=top.iteration, proposer=top.proposer,
                            label=top.label, parent=top.id, rationale=f"neighbour of {top.id}", defines=dict(d),
                            launch=top.launch, tunables=top.tunables)
                a.source_file = f"attempts/{a.id}.cu"
                a.sha256 = c.sha256
                self.run_dir.write_text(a.source_file, c.render())
                self.attempts.append(a)
                tried.add(tuple(sorted(d.items())) + (top.label,))
                extra.append(a)
        for a in extra:
            self._gate_attempt(a)
        batch.extend(extra)

    def _gate_attempt(self, a: Attempt, roles=("correctness", "performance")) -> Evaluation:
        cand = self._candidate(a)
        ev = self.gate.evaluate(cand, roles=roles)
        a.evaluation = ev.to_json()
        a.status = "passed" if ev.passed else "failed"
        a.reason, a.message, a.score_us = ev.reason, ev.message, ev.score_us
        self._write_history()
        mark = f"{ev.score_us:9.2f} µs" if ev.passed and ev.score_us else f"{a.reason}"
        self.progress(f"[kforge]   {a.id} {a.proposer:>10} {a.label[:28]:28} "
                      f"{' '.join(f'{k}={v}' for k, v in sorted(a.defines.items()))[:40]:40} {mark}")
        return ev

    def _maybe_move_best(self, passed: list[Attempt]) -> bool:
        """Re-measure the fastest new contender side by side with the best; switch only if it is
        faster beyond the noise and passes the holdout cases with fresh values."""
        contenders = sorted([a for a in passed if a.score_us and a.score_us < self.best.score_us],
                            key=lambda a: a.score_us)
        for c in contenders[:2]:
            best_ev, new_ev = self.gate.retime([self._candidate(self.best), self._candidate(c)],
                                               rounds=self.config.retime_rounds)
            if not (best_ev.passed and new_ev.passed):
                bad = new_ev if not new_ev.passed else best_ev
                c.message = f"re-measurement failed: {bad.reason}: {bad.message}"
                if not new_ev.passed:
                    c.status, c.reason = "failed", new_ev.reason
                continue
            noise = max([noise_band(x.timing) for ev in (best_ev, new_ev) for x in ev.cases] + [self.config.min_improvement])
            c.retimed = {"candidate_us": new_ev.score_us, "best_us": best_ev.score_us, "best_id": self.best.id,
                         "noise": noise}
            if new_ev.score_us >= best_ev.score_us * (1 - noise):
                c.message = (f"not faster beyond noise: {new_ev.score_us:.2f} vs {best_ev.score_us:.2f} µs "
                             f"side by side (noise {noise:.1%})")
                self._write_history()
                continue
            hold = self.gate.evaluate(self._candidate(c), roles=("holdout",))
            c.holdout = {"passed": hold.passed, "reason": hold.reason, "message": hold.message, "final": False}
            if not hold.passed:
                c.status, c.reason = "failed", "holdout_failed"
                c.message = "failed a hidden case (details withheld from proposers)"
                self._write_history()
                continue
            c.best = True
            self.best = c
            self._write_best()
            self._write_history()
            self.progress(f"[kforge]   new best {c.id}: {new_ev.score_us:.2f} µs vs {best_ev.score_us:.2f} µs "
                          f"side by side (x{self.speedup():.2f} vs initial)")
            return True
        return False

    # -- stop rules -------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.elapsed_before + (time.time() - self.started)

    def speedup(self) -> float:
        if self.best and self.initial and self.best.score_us and self.initial.score_us:
            return self.initial.score_us / self.best.score_us
        return 1.0

    def _time_up(self) -> bool:
        """--time-limit is checked before every candidate, not only between iterations."""
        return self.config.time_limit_s is not None and self.elapsed() >= self.config.time_limit_s

    def _check_stop(self) -> None:
        c = self.config
        if self.iteration >= c.max_iterations:
            raise StopRun("max_iterations")
        if c.budget_usd is not None and self.cost_usd >= c.budget_usd:
            raise StopRun("budget_usd")
        if c.max_tokens is not None and self.tokens["input"] + self.tokens["output"] >= c.max_tokens:
            raise StopRun("max_tokens")
        if self._time_up():
            raise StopRun("time_limit")
        if c.patience is not None and self.since_improvement >= c.patience:
            raise StopRun("patience")
        if c.target_speedup is not None and self.speedup() >= c.target_speedup:
            raise StopRun("target_speedup")

    # -- prompt -----------------------------------------------------------------------------
    def _prompt_attempt(self, a: Attempt) -> PromptAttempt:
        ev = a.evaluation or {}
        cases = [c for c in ev.get("cases", []) if c.get("role") != "holdout"]
        return PromptAttempt(id=a.id, source=(self.run_dir.path / a.source_file).read_text(), passed=a.status == "passed",
                             reason=a.reason, message=a.message if a.reason != "holdout_failed" else
                             "failed a hidden case", score_us=a.score_us, cases=cases,
                             compile_log=(ev.get("compile") or {}).get("log", ""), rationale=a.rationale,
                             defines=a.defines)

    def _prompt(self) -> str:
        if getattr(self.proposer, "needs_prompt", True) is False:
            return ""
        done = [a for a in self.attempts if a.status != "pending"]
        failures = [self._prompt_attempt(a) for a in done if a.status == "failed"][-self.config.failures_in_prompt:]
        passed = [a for a in done if a.status == "passed" and a.score_us]
        crossover = None
        if self.config.crossover_every and self.iteration % self.config.crossover_every == 0:
            distinct = {}
            for a in sorted(passed, key=lambda a: a.score_us):
                distinct.setdefault(a.label + a.proposer, a)
            tops = list(distinct.values())[:2]
            if len(tops) == 2:
                crossover = (self._prompt_attempt(tops[0]), self._prompt_attempt(tops[1]))
        ref = self.task.reference.path.read_text(encoding="utf-8")
        return build_prompt(self.task, reference_source=ref, device=self.gate.device_info(),
                            calibration=self.gate.calibrate(), best=self._prompt_attempt(self.best),
                            history=[self._prompt_attempt(a) for a in passed], failures=failures,
                            hints=self.config.hints, crossover=crossover, n_history=self.config.history_in_prompt)

    # -- evidence ---------------------------------------------------------------------------
    def _state(self) -> dict:
        return {"iteration": self.iteration, "since_improvement": self.since_improvement, "settled": self.settled,
                "tokens": self.tokens,
                "cost_usd": round(self.cost_usd, 6), "per_model": self.per_model, "elapsed_s": round(self.elapsed(), 3)}

    def _write_history(self) -> None:
        self.run_dir.write_json("history.json", {"task": self.task.name, "kernel_forge": __version__,
                                                  "state": self._state(), "baselines": self.baselines,
                                                  "attempts": [a.to_json() for a in self.attempts]})

    def _write_best(self) -> None:
        src = (self.run_dir.path / self.best.source_file).read_text()
        self.run_dir.write_text("best.cu", src)
        ev = self.best.evaluation or {}
        for c in ev.get("cases", []):
            if c.get("role") == "holdout":
                continue
            self.run_dir.write_json(f"best-case-{c['name']}.json", {
                "manifest": str(self.task.path), "kernel": "best.cu", "attempt": self.best.id,
                "case": c["name"], "role": c["role"], "seeds": c.get("seeds", []), "defines": self.best.defines,
                "launch": c.get("launch"), "median_us": (c.get("timing") or {}).get("median"),
                "command": f"kforge replay {self.run_dir.path / ('best-case-' + c['name'] + '.json')}"})

    def _iteration_line(self) -> None:
        done = [a for a in self.attempts if a.status != "pending"]
        rejected: dict[str, int] = {}
        for a in done:
            if a.status == "failed":
                rejected[a.reason] = rejected.get(a.reason, 0) + 1
        rej = ", ".join(f"{k} {v}" for k, v in sorted(rejected.items())) or "none"
        self.progress(f"[kforge] iteration {self.iteration}/{self.config.max_iterations}: {len(done)} gated, "
                      f"rejected: {rej}; best {self.best.id} x{self.speedup():.2f} vs initial; "
                      f"${self.cost_usd:.4f}, {self.tokens['input'] + self.tokens['output']} tokens")

    def _finish(self) -> dict:
        from .summary import write_summary

        # the final holdout check: not after an error, nor after Ctrl-C (the resumed run does it)
        if (self.best is not None and self.best is not self.initial
                and self.stop_reason not in ("error", "interrupted")):
            try:
                hold = self.gate.evaluate(self._candidate(self.best), roles=("holdout",))
                self.best.holdout = {"passed": hold.passed, "reason": hold.reason, "message": hold.message,
                                     "final": True}
            except KForgeError as exc:
                self.best.holdout = {"passed": False, "reason": "error", "message": str(exc), "final": True}
        if self.best is not None:
            self._write_best()
        self._write_history()
        summary = write_summary(self)
        self.progress(f"[kforge] stopped: {self.stop_reason}. Best {summary['best']['id'] if summary.get('best') else '-'}"
                      f" x{self.speedup():.2f} vs initial. Evidence: {self.run_dir.path}")
        left = self._pending()
        if left and self.stop_reason == "time_limit":
            self.progress(f"[kforge] {len(left)} candidate(s) left ungated; to gate them: "
                          f"kforge optimize --resume {self.run_dir.path} --time-limit LONGER")
        return summary
