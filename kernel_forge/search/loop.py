"""The plain loop: ask → gate → choose the best → record, until a stop rule fires.

One iteration is four calls in :meth:`Optimizer.run`: :meth:`~Optimizer._ask` (the slots, the
request, one proposal recorded per answer: :mod:`~kernel_forge.search.slots`,
:mod:`~kernel_forge.search.request_build`, :mod:`~kernel_forge.search.recording`),
:func:`~kernel_forge.search.gating.gate_batch` (gate what is pending, refine tuned groups),
:meth:`~Optimizer._settle` (side-by-side re-timing, case by case, holdout:
:mod:`kernel_forge.search.selection`) and :meth:`~Optimizer._record` (best.cu, profile,
counters).  Stop rules are :class:`~kernel_forge.search.stop_rules.StopRun` exceptions.
Everything goes through :class:`~kernel_forge.evidence.run_dir.RunDir` as it happens
(:mod:`~kernel_forge.search.run_evidence`) and the summary is written in ``finally``, so Ctrl-C or
a kill leaves a run that ``--resume`` continues (:mod:`~kernel_forge.search.run_start`).
"""
from __future__ import annotations

import time

from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.gate.gatelike import GateLike
from kernel_forge.model.candidate import Candidate
from kernel_forge.model.task import Task
from kernel_forge.proposers.base import Exhausted, ProposalRequest, Proposer
from kernel_forge.records.attempt import Attempt
from kernel_forge.reports.summary import origin
from kernel_forge.search import run_evidence, run_start, selection, stop_rules, translation
from kernel_forge.search.gating import gate_batch
from kernel_forge.search.prompt_blocks import PromptAttempt
from kernel_forge.search.prompts import write_prompt
from kernel_forge.search.recording import calls_of, record_calls, record_proposal
from kernel_forge.search.request_build import build_request, prompt_attempt
from kernel_forge.search.run_context import RunContext
from kernel_forge.search.slot_plan import plan_slots
from kernel_forge.search.slots import Slot, slot_of
from kernel_forge.search.stop_rules import StopRun

#: while a batch is gated, the history is saved at most this often (seconds); Ctrl-C, an error
#: and the batch's end save it at once, so only a hard kill can lose the verdicts of the last
#: second (left pending: --resume gates them again)
HISTORY_EVERY_S = 1.0


class Optimizer(RunContext):
    """The loop over one run (:class:`~kernel_forge.search.run_context.RunContext`): it keeps the
    loop, and saves the run's evidence for its parts."""

    def __init__(self, task: Task, gate: GateLike, proposer: Proposer, run: RunDir, config: LoopConfig,
                 progress=lambda msg: None, run_meta: dict | None = None, retrieved=None):
        super().__init__(task, gate, proposer, run, config, progress=progress, retrieved=retrieved)
        self.meta = run_meta or {}
        self._history_written = 0.0         # time.monotonic() of the last save of the history

    # the two figures the app layer reads from a run (kforge optimize --dry-run, the connection
    # message); everything else reads ``state``
    @property
    def best(self) -> Attempt | None:
        return self.state.best

    @property
    def stop_detail(self) -> str:
        return self.state.stop_detail

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> dict:
        self.progress(f"[kforge] run {self.run_dir.path} — task {self.task.name}, proposer {self.proposer.name}, "
                      f"search {self.strategy.name}")
        try:
            self._start()
            while True:
                batch = run_start.unsettled_batch(self)      # recorded before a kill, or None
                if batch is None:
                    stop_rules.check_stop(self)
                    batch = self._ask()
                gate_batch(self, batch)
                self._record(batch, self._settle(batch))
        except StopRun as stop:
            self.state.stop_reason, self.state.stop_detail = stop.reason, stop.detail
        except Exhausted as exc:
            self.state.stop_reason = f"proposer_exhausted: {exc}"
            self.state.stop_detail = self.search_line()
        except KeyboardInterrupt:
            self.state.stop_reason = "interrupted"
            self._write_history()
            raise
        finally:
            if not self.state.stop_reason:
                self.state.stop_reason = "error"
            summary = self._finish()
        return summary

    def _start(self) -> None:
        if self.load_recorded():
            self.progress(f"[kforge] resuming at iteration {self.state.iteration} with {len(self.state.attempts)} "
                          "attempts recorded")
        if self.task.initial is not None and (self.state.initial is None or self.state.initial.status != "passed"):
            self._evaluate_initial()
        if not self.is_tuner and self.proposer.name != "replay" and self.state.best is not None:
            self._evaluate_bound()           # with a model: the bound pattern, gated, for the prompt
        arch = getattr(self.gate, "arch", None) if self.is_tuner else None
        if arch and hasattr(self.proposer, "keep_buildable"):
            for note in self.proposer.keep_buildable(arch):
                self.progress(f"[kforge] {note}")
        run_start.time_baselines(self)
        self._profile(self.state.best)

    def _ask(self) -> list[Attempt]:
        """One request for ``candidates`` proposals (fix turns first, then the search strategy's
        parents and directions); every proposal is recorded, duplicates and conflicts with their
        verdict."""
        state = self.state
        state.iteration += 1
        slots = plan_slots(self, state.iteration)
        request = build_request(self, slots, state.iteration, profile=True)
        try:
            result = self.proposer.propose(request)
        except BaseException:
            state.iteration -= 1          # nothing was recorded: this iteration did not happen
            raise
        if self.proposer.needs_prompt:   # what each proposal was asked, as the model saw it
            write_prompt(self.run_dir, state.iteration, request.system, request.static_prefix,
                         [request.prompt_for(i) for i in range(len(request.slots))] or [request.prompt])
        files = record_calls(self, result)
        for err in result.errors:
            self.progress(f"[kforge]   proposer error: {err}")
        self.spaces.allocate(result.proposals, state.attempts, tuner=self.is_tuner)
        batch: list[Attempt] = []
        for i, p in enumerate(result.proposals):
            slot = slot_of(p, i, slots)
            p.parent = p.parent or (slot.fix.id if slot.fix else slot.parent.id if slot.parent
                                    else state.best.id if state.best else None)
            batch.extend(record_proposal(self, p, slot, calls_of(p, result, files)))
        if result.unreachable and not result.proposals:
            self._write_history()
            raise StopRun("unreachable", result.errors[0] if result.errors else "no model call connected")
        if getattr(result, "budget_exhausted", False) and not result.proposals:
            self._write_history()
            raise StopRun("budget_usd", next((e for e in result.errors if "budget" in e), ""))
        state.settled = False
        self._write_history()
        if not result.proposals:
            self.progress("[kforge]   no usable proposal this iteration")
        return batch

    def _settle(self, batch: list[Attempt]) -> Attempt | None:
        """The iteration's new best (or None); while there is no baseline, its first attempt that
        passes the gate and the holdout becomes the baseline first (:mod:`kernel_forge.search.translation`)."""
        if translation.translating(self.state):
            base = translation.choose_baseline(self.gate, batch, candidate=self._candidate, save=self._write_history)
            if base is None:
                return None
            self.state.initial = self.state.best = base
            self.progress(f"[kforge]   baseline {base.id}: {origin(base)['note']}; "
                          f"{base.score_us:.2f} µs, every speedup is measured against it")
        return selection.maybe_move_best(self.gate, self.state.best, batch, self.rules,
                                         candidate=self._candidate, save=self._write_history)

    def _record(self, batch: list[Attempt], new_best: Attempt | None) -> None:
        if new_best is not None:
            self.state.best = new_best
            r = new_best.retimed or {}
            cases = r.get("cases") or {}
            faster = ", ".join(f"{n} x{cases[n]['ratio']:.3f} ±{cases[n]['band']:.1%}"
                               for n in r.get("faster", []) if n in cases)
            self.progress(f"[kforge]   new best {new_best.id}: {r.get('candidate_us', 0):.2f} µs vs "
                          f"{r.get('best_us', 0):.2f} µs side by side (x{self.state.speedup():.2f} vs initial)"
                          + (f"; faster on {faster}" if faster else ""))
        improved = new_best is not None or any(a.best for a in batch)   # a resumed batch may have moved it
        if improved:
            self._write_best()
        self._profile(self.state.best)
        self.state.since_improvement = 0 if improved else self.state.since_improvement + 1
        self.state.settled = True
        self._write_history()
        run_evidence.iteration_line(self)

    # -- what the loop does for its parts (RunContext) ---------------------------------------------
    def save(self) -> None:
        self._write_history()

    def save_soon(self) -> None:
        if time.monotonic() - self._history_written >= HISTORY_EVERY_S:
            self._write_history()

    def write_best(self) -> None:
        self._write_best()

    def profile(self, a: Attempt | None, *, final: bool = False) -> None:
        self._profile(a, final=final)

    # -- the evidence and the start, one method each (a scripted benchmark replaces them) ---------
    def _write_history(self) -> None:
        self._history_written = time.monotonic()
        run_evidence.save_history(self)

    def _history(self) -> dict:
        return run_evidence.history_doc(self)

    def _write_best(self) -> None:
        run_evidence.write_best(self)

    def _profile(self, a: Attempt | None, *, final: bool = False) -> None:
        run_evidence.profile(self, a, final=final)

    def _evaluate_initial(self) -> None:
        run_start.evaluate_initial(self)

    def _evaluate_bound(self) -> None:
        run_start.evaluate_bound(self)

    def _finish(self) -> dict:
        return run_evidence.finish(self)

    # -- what the app and the tests read of a run ----------------------------------------------------
    def load_recorded(self) -> bool:
        """The run's recorded attempts and state (nothing is written); False when there is none yet."""
        return run_start.load_recorded(self)

    def next_request(self) -> ProposalRequest:
        """The request the next iteration would send (no call made, nothing written)."""
        return build_request(self, plan_slots(self, self.state.iteration + 1), self.state.iteration + 1)

    def _request(self, slots: list[Slot], iteration: int, *, profile: bool = False) -> ProposalRequest:
        return build_request(self, slots, iteration, profile=profile)

    def _prompt(self) -> str:
        """The full user prompt the first proposal of the next iteration would get."""
        return self.next_request().full_prompt(0)

    def _prompt_attempt(self, a: Attempt, *, profile: bool = False) -> PromptAttempt:
        return prompt_attempt(self, a, profile=profile)

    def _source(self, a: Attempt) -> str:
        return self.kernels.source(a)

    def _candidate(self, a: Attempt) -> Candidate:
        return self.kernels.candidate(a)

    def time_limit(self) -> tuple[float | None, str]:
        return stop_rules.time_limit(self)

    def iteration_limit(self) -> int | None:
        """--max-iterations, or its default: 7 for models and replays, none for the built-in tuner."""
        return stop_rules.iteration_limit(self.config, self.proposer.name)

    def roof_reached(self, share: float) -> tuple[bool, str]:
        return stop_rules.roof_reached(self, share)

    def search_summary(self) -> dict:
        return self.spaces.summary(self.state.attempts)

    def search_line(self) -> str:
        return self.spaces.line(self.state.attempts)
