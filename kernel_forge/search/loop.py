"""The plain loop: ask → gate → choose the best → record, until a stop rule fires.

One iteration is four calls in :meth:`Optimizer.run`: :meth:`~Optimizer._ask` (the prompt, one
direction per proposal, de-duplication before any GPU time), :meth:`~Optimizer._gate_batch`
(gate what is pending, refine tuned groups: :mod:`kernel_forge.search.spaces`),
:func:`selection.maybe_move_best` (side-by-side re-timing, case by case, holdout:
:mod:`kernel_forge.search.selection`) and :meth:`~Optimizer._record` (best.cu, profile, counters).  Stop
rules are :class:`StopRun` exceptions.  Everything goes through
:class:`~kernel_forge.evidence.run_dir.RunDir` as it happens and the summary is written in ``finally``,
so Ctrl-C or a kill leaves a run that ``--resume`` continues.
"""
from __future__ import annotations

import random
import re
import time
from dataclasses import asdict

from kernel_forge import __version__
from kernel_forge.config.loop import LoopConfig
from kernel_forge.search import feedback, reflection, spaces as search, selection, strategies, translation
from kernel_forge.model.candidate import Candidate, Launch, parse_candidate
from kernel_forge.gate.diagnosis import diagnose, direction_items
from kernel_forge.common.errors import CandidateError, KForgeError
from kernel_forge.evidence.history_log import HistoryLog, read_history
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.gate.gatelike import GateLike
from kernel_forge.search import prompts as prompts_mod
from kernel_forge.search.prompts import PromptAttempt, build_prompt_parts, system_prompt, write_prompt
from kernel_forge.proposers.base import Exhausted, Proposal, ProposalRequest, ProposalResult, Proposer
from kernel_forge.model.task import Task
from kernel_forge.reports.summary import origin
from kernel_forge.records.attempt import Attempt
from kernel_forge.search.slots import Slot
from kernel_forge.records.run_state import RunState
from kernel_forge.model.verdict import NOT_THE_KERNELS_FAULT, Evaluation

#: reasons the loop gives itself, before any GPU time (the attempt has no evaluation)
NOT_GATED = ("duplicate", "launch_conflict", "bad_candidate")
#: while a batch is gated, the history is saved at most this often (seconds); Ctrl-C, an error
#: and the batch's end save it at once, so only a hard kill can lose the verdicts of the last
#: second (left pending: --resume gates them again)
HISTORY_EVERY_S = 1.0
#: --max-iterations when it is not given, for models and replays (the tuner has none)
DEFAULT_ITERATIONS = 7


class StopRun(Exception):
    """A stop rule fired; ``reason`` is recorded in the summary."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class LaunchConflict(CandidateError):
    """The source's ``// kforge:`` header and the proposal's tool arguments disagree."""


def iteration_limit(config: LoopConfig, proposer: str) -> int | None:
    """The iterations a run may take: ``config.max_iterations``, else 7 (none for the tuner)."""
    if config.max_iterations is not None:
        return config.max_iterations
    return None if proposer == "tune" else DEFAULT_ITERATIONS


def _launch_text(launch: Launch) -> str:
    fmt = lambda t: "[" + ", ".join(str(x) for x in t) + "]"  # noqa: E731
    return (f"grid {fmt(launch.grid)}, block {fmt(launch.block)}, shared_mem {launch.shared_mem}"
            + (", cooperative" if launch.cooperative else ""))


def _same_launch(a: Launch, b: Launch) -> bool:
    """The header's launch ``a`` and the tool's ``b`` agree (a tool launch that does not ask for a
    cooperative launch leaves the header's choice)."""
    norm = lambda t: tuple(re.sub(r"\s+", "", str(x)) for x in t) + ("1",) * (3 - len(t))  # noqa: E731
    return ((norm(a.grid), norm(a.block), norm((a.shared_mem,))) == (norm(b.grid), norm(b.block), norm((b.shared_mem,)))
            and (a.cooperative or not b.cooperative))


def candidate_from_proposal(p: Proposal, name: str) -> Candidate:
    """A proposal's source plus its tool ``launch``/``tunables`` as one candidate.  Where the
    source's ``// kforge:`` header says otherwise, :class:`LaunchConflict` (the model is told)."""
    cand = parse_candidate(p.source, name=name)
    launch = cand.launch
    if p.launch:
        tool = Launch(tuple(p.launch["grid"]), tuple(p.launch["block"]), p.launch.get("shared_mem", 0),
                      bool(p.launch.get("cooperative", False)))
        if launch is None:
            launch = tool
        elif not _same_launch(launch, tool):
            raise LaunchConflict(f"the source's // kforge: header says {_launch_text(launch)} but the tool's "
                                 f"launch says {_launch_text(tool)}; nothing was run",
                                 file=name, hint="give the launch once (header or tool argument), or make them agree")
    tunables = dict(cand.tunables)
    defines = dict(cand.defines)
    for k, values in (p.tunables or {}).items():
        if k in tunables:
            if [float(v) for v in tunables[k]] != [float(v) for v in values]:
                raise LaunchConflict(f"tunable {k}: the source's // kforge: header says {list(tunables[k])} but "
                                     f"the tool's tunables say {list(values)}; nothing was run", file=name,
                                     hint="declare each tunable once, or the same values in both places")
            continue
        tunables[k] = tuple(values)
        defines.setdefault(k, values[0])
    return Candidate(source=cand.source, name=name, launch=launch, tunables=tunables, defines=defines,
                     constraints=cand.constraints, dispatch=cand.dispatch)


class Optimizer:
    """The loop over one run's :class:`~kernel_forge.records.run_state.RunState` (``state``);
    ``gate`` and ``proposer`` are swapped by interface (tests use fakes).  Beside the state it
    keeps only what it derives from it: the de-duplication index (``seen``, ``bodies``), the
    spaces of tunable kernels and the diagnoses of bests and parents."""

    def __init__(self, task: Task, gate: GateLike, proposer: Proposer, run: RunDir, config: LoopConfig,
                 progress=lambda msg: None, run_meta: dict | None = None, retrieved=None):
        from kernel_forge.search.retrieval import Retrieved

        self.task, self.gate, self.proposer, self.run_dir, self.config = task, gate, proposer, run, config
        self.retrieved = retrieved if retrieved is not None else Retrieved()   #: what the archive gave this run
        self.progress = progress
        self.meta = run_meta or {}
        self.state = RunState()            #: what history.json keeps, and this process's outcome
        self.seen: dict[str, str] = {}     # search.kernel_key -> the first attempt with that kernel
        self.bodies: dict[str, str] = {}   # attempt id -> search.body_key of its kernel
        self._diag: tuple | None = None     # (best id, profile file, Diagnosis) of the current best
        self._diags: dict[tuple, object] = {}   # (attempt id, profile) -> Diagnosis of a parent
        self.rules = selection.Rules(rounds=config.retime_rounds, min_improvement=config.min_improvement)
        self.strategy = strategies.get(config.search)
        self._spaces: dict[str, strategies.Space] = {}   # body key -> the space of a tunable kernel
        self._allot: dict[str, int] = {}    # label -> settings it may gate this iteration
        self._history_written = 0.0         # time.monotonic() of the last save of the history
        self.history_log = HistoryLog(run)  #: the run's history as it happens (history.jsonl)

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
                batch = self._unsettled_batch()          # recorded before a kill, or None
                if batch is None:
                    self._check_stop()
                    batch = self._ask()
                self._gate_batch(batch)
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

    # -- start / resume ---------------------------------------------------------------------
    def _start(self) -> None:
        if self.load_recorded():
            self.progress(f"[kforge] resuming at iteration {self.state.iteration} with {len(self.state.attempts)} "
                          "attempts recorded")
        if self.task.initial is not None and (self.state.initial is None or self.state.initial.status != "passed"):
            self._evaluate_initial()
        if not self._is_tuner() and self.proposer.name != "replay" and self.state.best is not None:
            self._evaluate_bound()           # with a model: the bound pattern, gated, for the prompt
        if not self.state.baselines:
            for name in self.task.baselines:
                self.progress(f"[kforge] timing vendor baseline {name}")
                ev = self.gate.evaluate_baseline(name)
                self.state.baselines[name] = ev.to_json(with_samples=False)
            self._write_history()
        self._profile(self.state.best)

    def load_recorded(self) -> bool:
        """The run's recorded attempts and state from its history (history.jsonl, else history.json;
        nothing is written); False when there is none yet."""
        hist = read_history(self.run_dir)
        if hist:
            self.state = RunState.from_json(hist, started=self.state.started)
            for a in self.state.attempts:
                if a.proposer == "initial" and a.status == "pending" and a is not self.state.initial:
                    # an earlier release recorded every setting of an initial kernel's tune lines
                    # as pending attempts that nothing ever gated (the run stalled on them)
                    a.status, a.reason = "failed", "duplicate"
                    a.message = "a further setting of the initial kernel recorded by an earlier release; " \
                                "the tuner searches the initial kernel's settings itself"
                self._remember(a)
        return bool(hist)

    def next_request(self) -> ProposalRequest:
        """The request the next iteration would send (no call made, nothing written)."""
        return self._request(self._slots(self.state.iteration + 1), self.state.iteration + 1)

    def _evaluate_initial(self) -> None:
        a = self.state.initial
        if a is None:
            source = self.task.initial.read_text(encoding="utf-8")
            a = self._record_proposal(Proposal(source=source, rationale="the task's initial kernel",
                                               proposer="initial", label=self.task.initial.name), Slot())[0]
            self.state.initial = a
        ev = self._gate_attempt(a, roles=("correctness", "performance", "holdout"))
        if not ev.passed:
            self._write_history()
            raise KForgeError(f"the task's initial kernel fails the gate ({ev.reason}): {ev.message}",
                              hint="fix the initial kernel or the manifest first: kforge eval MANIFEST")
        a.best = a.baseline = True
        self.state.best = a
        self._write_history()

    def _bound(self) -> Attempt | None:
        """The passing attempt of the task's bound pattern (a model run gates it at the start)."""
        return next((a for a in self.state.attempts if a.proposer == "bound" and a.status == "passed"), None)

    def _evaluate_bound(self) -> None:
        """With a model: gate the pattern of the task's kind bound to its signature once, at its
        default setting (:mod:`kernel_forge.search.bound`); the prompt shows it with its time and
        offers it as a second parent, and it becomes the best if it is faster."""
        from kernel_forge.search.bound import bound_templates, gate_label, gate_source

        if any(a.proposer == "bound" for a in self.state.attempts):
            return
        found = bound_templates(self.task, self.task.templates)
        for note in found.notes:
            self.progress(f"[kforge] {note}")
        batch = []
        for path in found.templates:
            prop = Proposal(source=gate_source(path.read_text(encoding="utf-8")), proposer="bound",
                            label=gate_label(path), rationale=f"the {found.match.kind} pattern bound to this "
                            "task's signature, at its default setting")
            for a in self._record_proposal(prop, Slot()):
                if a.status == "pending":
                    self._gate_attempt(a)
                batch.append(a)
        new = selection.maybe_move_best(self.gate, self.state.best, batch, self.rules, candidate=self._candidate,
                                        save=self._write_history) if batch else None
        if new is not None:
            new.best, self.state.best = True, new
            self._write_best()
        self._write_history()

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

    def _unsettled_batch(self) -> list[Attempt] | None:
        """The iteration a kill interrupted: gate what is pending without asking again, then decide
        the best over the whole iteration (its gated attempts included).  None when settled."""
        pending = [a for a in self.state.attempts if a.status == "pending"]
        if not pending and self.state.settled:
            return None
        if pending and self._time_up():
            raise self._time_stop()         # left pending: --resume with a longer limit gates them
        if pending:
            self.state.iteration = pending[0].iteration
        return [a for a in self.state.attempts if a.iteration == self.state.iteration and a.proposer != "initial"]

    # -- asking -----------------------------------------------------------------------------
    def _ask(self) -> list[Attempt]:
        """One request for ``candidates`` proposals (fix turns first, then the search strategy's
        parents and directions); every proposal is recorded, duplicates and conflicts with their
        verdict."""
        self.state.iteration += 1
        slots = self._slots(self.state.iteration)
        request = self._request(slots, self.state.iteration, profile=True)
        try:
            result = self.proposer.propose(request)
        except BaseException:
            self.state.iteration -= 1          # nothing was recorded: this iteration did not happen
            raise
        if self.proposer.needs_prompt:   # what each proposal was asked, as the model saw it
            write_prompt(self.run_dir, self.state.iteration, request.system, request.static_prefix,
                         request.prompts or [request.prompt])
        files = self._record_calls(result)
        for err in result.errors:
            self.progress(f"[kforge]   proposer error: {err}")
        self._allocate(result.proposals)
        batch: list[Attempt] = []
        for i, p in enumerate(result.proposals):
            slot = self._slot_of(p, i, slots)
            p.parent = p.parent or (slot.fix.id if slot.fix else slot.parent.id if slot.parent
                                    else self.state.best.id if self.state.best else None)
            batch.extend(self._record_proposal(p, slot, self._calls_of(p, result, files)))
        if result.unreachable and not result.proposals:
            self._write_history()
            raise StopRun("unreachable", result.errors[0] if result.errors else "no model call connected")
        if getattr(result, "budget_exhausted", False) and not result.proposals:
            self._write_history()
            raise StopRun("budget_usd", next((e for e in result.errors if "budget" in e), ""))
        self.state.settled = False
        self._write_history()
        if not result.proposals:
            self.progress("[kforge]   no usable proposal this iteration")
        return batch

    def _is_tuner(self) -> bool:
        return self.proposer.name == "tune"

    def _slots(self, iteration: int) -> list[Slot]:
        n = self.config.candidates
        if self._is_tuner():
            return [Slot() for _ in range(n)]
        by_id = {a.id: a for a in self.state.attempts}
        fixes = self._fixes(iteration - 1)[:n]
        slots = [Slot(direction=f"fix {f.id} ({f.reason}), keeping its approach"
                      + (f": {self._root(f).direction}" if self._root(f).direction else ""), fix=f, parent=f,
                      technique=strategies.technique_of(self._root(f), by_id)) for f in fixes]
        if translation.translating(self.state):      # no baseline yet: translation directions, no parents
            return slots + [Slot(direction=d) for d in translation.directions(n - len(fixes))]
        for p in self.strategy.plan(self._plan_context(iteration), n - len(fixes)):
            slots.append(Slot(direction=p.direction, parent=p.parent, second=p.second, technique=p.technique))
        bound = self._bound()                 # the bound pattern as a second parent, once an iteration
        if bound is not None and bound is not self.state.best and not any(s.second for s in slots):
            # only where it is faster than the slot's parent on some case: else it has nothing to give
            s = next((s for s in slots if s.fix is None and (s.parent or self.state.best) is not bound
                      and strategies.wins_over(bound, s.parent or self.state.best, self.config.min_improvement)), None)
            if s is not None:
                s.second, s.technique = bound, s.technique or "crossover"
        return slots

    def _parents(self, slots: list[Slot]) -> list[Attempt]:
        """The passed kernels the slots start from or combine (a fix's failed attempt is not one)."""
        out: list[Attempt] = []
        for s in slots:
            for x in (s.parent, s.second):
                if x is not None and x.status == "passed" and s.fix is not x and x not in out:
                    out.append(x)
        return out

    def _plan_context(self, iteration: int) -> strategies.PlanContext:
        c = self.config
        return strategies.PlanContext(attempts=self.state.attempts, best=self.state.best, initial=self.state.initial,
                                      iteration=iteration, body=lambda a: self.bodies.get(a.id, a.id),
                                      options=self._options, crossover_every=c.crossover_every,
                                      min_improvement=c.min_improvement, seed=c.seed)

    def _options(self, parent: Attempt, k: int) -> list[tuple[str, str]]:
        """(technique, direction) pairs from the diagnosis of ``parent``."""
        return direction_items(self._diagnosis() if parent is self.state.best else self._diagnosis_of(parent), k)

    def _fixes(self, iteration: int) -> list[Attempt]:
        """Proposals of ``iteration`` whose every setting failed and that have a fix turn left."""
        if self.config.fix_turns <= 0:
            return []
        groups: dict[str, list[Attempt]] = {}
        for a in self.state.attempts:
            if a.iteration == iteration and a.proposer != "initial":
                groups.setdefault(a.label, []).append(a)
        out = []
        for members in groups.values():
            first = members[0]
            if all(m.status == "failed" for m in members) and first.reason != "duplicate" \
                    and first.reason not in NOT_THE_KERNELS_FAULT and self._fix_depth(first) < self.config.fix_turns:
                out.append(first)
        return out

    def _fix_chain(self, a: Attempt) -> list[Attempt]:
        """``a``, the attempt it was asked to fix, the one that one fixed, ... (oldest last)."""
        chain, by_id = [a], {x.id: x for x in self.state.attempts}
        while chain[-1].fix_of in by_id and len(chain) <= len(by_id):
            chain.append(by_id[chain[-1].fix_of])
        return chain

    def _fix_depth(self, a: Attempt) -> int:
        return len(self._fix_chain(a)) - 1

    def _root(self, a: Attempt) -> Attempt:
        return self._fix_chain(a)[-1]

    # -- the settings of tunable kernels ----------------------------------------------------
    def _space(self, cand: Candidate, label: str = "") -> strategies.Space:
        """The space of ``cand``'s kernel (its tunables), with every recorded setting of it."""
        body = search.body_key(cand)
        sp = self._spaces.get(body)
        if sp is None:
            sp = self._spaces[body] = strategies.Space(cand, label)
            sp.seed = self.config.seed
        for a in self.state.attempts:
            if self.bodies.get(a.id) != body or a.dispatch:     # a dispatch rule is not one setting
                continue
            status = "ruled_out" if a.reason in NOT_GATED else a.status
            sp.add(a.defines, a.id, a.score_us if a.status == "passed" else None, status)
        return sp

    def _allocate(self, proposals: list[Proposal]) -> None:
        """The settings each of the tuner's templates may gate this iteration (the strategy splits
        ``tune_budget`` per template by promise); a model's tuned proposal gets ``tune_budget``."""
        self._allot = {}
        if not self._is_tuner():
            return
        spaces, labels = [], []
        for p in proposals:
            try:
                cand = parse_candidate(p.source, name=p.label or "template")
            except CandidateError:
                continue
            spaces.append(self._space(cand, p.label))
            labels.append(p.label)
        for label, n in zip(labels, self.strategy.allocate(spaces, self.config.tune_budget)):
            self._allot[label] = n

    def _rng(self, label: str, n: int) -> random.Random:
        return random.Random(f"{self.config.seed}:{self.state.iteration}:{label}:{n}")

    def _first_settings(self, p: Proposal, cand: Candidate, warm: list[dict],
                        exclude: set[tuple]) -> list[tuple[dict, str]]:
        """The first round of settings of a proposal (after the archive's ``warm`` ones)."""
        c = self.config
        budget = self._allot.get(p.label, c.tune_budget)
        if not cand.tunables or cand.dispatch is not None:    # a dispatch rule is gated whole, as written
            return [(d, "") for d in search.expand(cand, budget, exclude=exclude)]
        space = self._space(cand, p.label)
        if self.strategy.name == "greedy" and not space.trials:      # today's first sample
            picked = search.expand(cand, max(0, budget - len(warm)), seed=c.seed + self.state.iteration,
                                   exclude=exclude | {tuple(sorted(d.items())) for d in warm})
            return [(d, "") for d in picked]
        k = max(0, min(budget, self.strategy.round_size(budget, c.refine)) - len(warm))
        skip = exclude | {tuple(sorted(d.items())) for d in warm}
        picked = self.strategy.pick(space, k + len(warm), self._rng(p.label, 0))
        return [(d, why) for d, why in picked if tuple(sorted(d.items())) not in skip][:k]

    def _spent(self) -> list[str]:
        """The tuner's templates whose every setting was gated or ruled out."""
        out = []
        for label, cand in self._tuner_templates().items():
            if self._space(cand, label).exhausted():
                out.append(label)
        return out

    def _tuner_templates(self) -> dict[str, Candidate]:
        """label -> the template (with its tunables) of every template the tuner proposed."""
        out: dict[str, Candidate] = {}
        for a in self.state.attempts:
            if a.proposer == "tune" and a.label not in out and a.id in self.bodies and not a.dispatch:
                try:
                    out[a.label] = self._candidate(a)
                except (CandidateError, OSError):
                    continue
        return out

    def search_summary(self) -> dict:
        """The strategy and every tunable kernel's space as ``summary.json`` records them."""
        spaces = []
        for body, sp in list(self._spaces.items()):
            if sp.names:
                spaces.append(self._space(sp.cand, sp.label).counts())
        return {"strategy": self.strategy.name, "spaces": spaces}

    def search_line(self) -> str:
        """Where the tuner's search stands: per template, settings gated of all."""
        parts = []
        for label, cand in self._tuner_templates().items():
            c = self._space(cand, label).counts()
            left = c["settings"] - c["gated"] - c["ruled_out"] - c["pending"]
            parts.append(f"{label}: {c['gated']} of {c['settings']}{'' if c['exact'] else ' (estimated)'} settings "
                         f"gated" + (f", {c['failed']} of them failed" if c["failed"] else "")
                         + (f", {c['ruled_out']} ruled out" if c["ruled_out"] else "")
                         + (f", {left} left" if left > 0 else ""))
        return "; ".join(parts)

    @staticmethod
    def _slot_of(p: Proposal, i: int, slots: list[Slot]) -> Slot:
        """The slot a proposal answers: by its direction where the proposer echoes it, else by position."""
        for s in slots:
            if p.direction and s.direction == p.direction:
                return s
        return slots[i % len(slots)] if slots else Slot(direction=p.direction)

    def _record_calls(self, result: ProposalResult) -> list[str]:
        files = []
        for call in result.calls:
            idx = self.run_dir.next_model_index()
            name = f"model-{idx:03d}.json"
            self.run_dir.write_json(name, {"index": idx, "iteration": self.state.iteration, **asdict(call)})
            files.append(name)
            self.state.tokens["input"] += call.input_tokens
            self.state.tokens["output"] += call.output_tokens
            self.state.cost_usd += call.cost_usd
            m = self.state.per_model.setdefault(f"{call.provider}:{call.model}",
                                          {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0})
            m["calls"] += 1
            m["input_tokens"] += call.input_tokens
            m["output_tokens"] += call.output_tokens
            m["cost_usd"] += call.cost_usd
        return files

    @staticmethod
    def _calls_of(p: Proposal, result: ProposalResult, files: list[str]) -> list[tuple[str, object]]:
        """(file, ModelCall) of the calls that produced ``p`` (``Proposal.calls``; a lone proposal
        from a proposer that does not say owns every call of its request)."""
        idx = p.calls if p.calls else (range(len(files)) if len(result.proposals) == 1 else [])
        return [(files[i], result.calls[i]) for i in idx if 0 <= i < len(files)]

    # -- recording proposals ----------------------------------------------------------------
    def _new_attempt(self, p: Proposal, slot: Slot, **kw) -> Attempt:
        technique = slot.technique or (f"tune:{p.label}" if p.proposer == "tune" else "")
        a = Attempt(id=f"a{len(self.state.attempts):04d}", iteration=self.state.iteration, proposer=p.proposer,
                    label=p.label,
                    parent=p.parent, rationale=p.rationale, direction=slot.direction or p.direction,
                    fix_of=slot.fix.id if slot.fix else None, technique=technique,
                    second_parent=slot.second.id if slot.second else None,
                    predicted_speedup=p.predicted_speedup, **kw)
        a.source_file = f"attempts/{a.id}.cu"
        self.state.attempts.append(a)
        return a

    def _record_proposal(self, p: Proposal, slot: Slot, calls=()) -> list[Attempt]:
        """Write a proposal's attempts: one per setting to gate (pending), or one failed attempt
        (``launch_conflict``, ``bad_candidate``, ``duplicate``) that costs no GPU time."""
        base_id = f"a{len(self.state.attempts):04d}"
        p.label = p.label or base_id   # model proposals: a label of their own, so their settings group apart
        out: list[Attempt] = []
        try:
            cand = candidate_from_proposal(p, name=f"{base_id}.cu")
            if int(cand.count_configurations()) == 0:
                raise CandidateError("no setting of its tunables satisfies its constraints", file=cand.name)
        except CandidateError as exc:
            reason = "launch_conflict" if isinstance(exc, LaunchConflict) else "bad_candidate"
            a = self._new_attempt(p, slot, status="failed", reason=reason, message=str(exc))
            self.run_dir.write_text(a.source_file, p.source)
            out.append(a)
        else:
            exclude = self._tried(cand)
            warm: list[dict] = []
            if p.proposer == "initial":      # the kernel as the user wrote it: its declared setting only
                picked = [(dict(cand.defines), "")]     # (its tune lines are the tuner's to search)
            else:
                # archived settings of this template measured on this GPU go first, then the search's own
                warm = [d for d in self.retrieved.configs_for(cand, p.label)
                        if tuple(sorted(d.items())) not in exclude
                        and cand.dispatch is None]     # a dispatch rule is gated whole, as written
                picked = [(d, "archived") for d in warm] + self._first_settings(p, cand, warm, exclude)
            if not picked:
                out.append(self._duplicate(p, slot, cand))
            for d, why in picked:
                c = cand.with_defines(d)
                a = self._new_attempt(p, slot, defines=dict(d), launch=c.launch.to_json() if c.launch else None,
                                      tunables={k: list(v) for k, v in c.tunables.items()},
                                      dispatch=c.dispatch.to_json() if c.dispatch else None)
                if why and why != "archived":
                    a.rationale = f"{a.rationale} [search {self.strategy.name}: {why}]".strip()
                if d in warm:
                    src = self.retrieved.setting_for(p.label, d) or {}
                    a.rationale = (f"archived setting #{src.get('id', '?')} from {src.get('run', '?')}/"
                                   f"{src.get('attempt', '?')} ({src.get('score_us') or 0:.2f} µs), gated first; "
                                   + a.rationale)
                a.sha256 = c.sha256
                self.run_dir.write_text(a.source_file, c.render())
                self._remember(a, c)
                out.append(a)
        first = out[0]
        first.model_calls = [f for f, _ in calls]
        first.cost_usd = round(sum(c.cost_usd for _, c in calls), 6)
        first.tokens = {"input": sum(c.input_tokens for _, c in calls), "output": sum(c.output_tokens for _, c in calls)}
        for a in out[1:]:
            a.model_calls = list(first.model_calls)
        return out

    def _duplicate(self, p: Proposal, slot: Slot, cand: Candidate) -> Attempt:
        key = search.kernel_key(cand, self.task)
        if key not in self.seen:   # every setting was tried: name the one of the default setting's kin
            key = next(k for k in (search.kernel_key(cand.with_defines(d), self.task) for d in cand.configurations())
                       if k in self.seen)
        earlier = next(a for a in self.state.attempts if a.id == self.seen[key])
        verdict = (f"passed at {earlier.score_us:.2f} µs" if earlier.status == "passed" and earlier.score_us
                   else f"{earlier.status}: {earlier.reason}" if earlier.reason else earlier.status)
        a = self._new_attempt(p, slot, status="failed", reason="duplicate", defines=dict(cand.defines),
                              launch=cand.launch.to_json() if cand.launch else None,
                              tunables={k: list(v) for k, v in cand.tunables.items()},
                              dispatch=cand.dispatch.to_json() if cand.dispatch else None,
                              message=f"the same kernel as {earlier.id} ({verdict}): same normalised source, "
                                      "launch and defines; not gated again")
        a.sha256 = cand.sha256
        self.run_dir.write_text(a.source_file, cand.render())
        self._remember(a, cand)
        self.progress(f"[kforge]   {a.id} {a.proposer:>10} duplicate of {earlier.id}")
        return a

    def _remember(self, a: Attempt, cand: Candidate | None = None) -> None:
        """Add an attempt's kernel to the de-duplication index (not those that never parsed)."""
        if a.reason in ("bad_candidate", "launch_conflict"):
            return
        try:
            cand = cand or self._candidate(a)
        except (CandidateError, OSError):
            return
        self.seen.setdefault(search.kernel_key(cand, self.task), a.id)
        self.bodies[a.id] = search.body_key(cand)

    def _tried(self, cand: Candidate) -> set[tuple]:
        """The settings of ``cand`` whose kernel an earlier attempt already has (only the settings
        recorded for its body are looked at: a space too large to list is never listed)."""
        body = search.body_key(cand)
        out = set()
        for a in self.state.attempts:
            if self.bodies.get(a.id) != body:
                continue
            d = {**cand.defines, **a.defines}
            if search.kernel_key(cand.with_defines(d), self.task) in self.seen:
                out.add(tuple(sorted(d.items())))
        return out

    def _candidate(self, a: Attempt) -> Candidate:
        text = (self.run_dir.path / a.source_file).read_text(encoding="utf-8")
        return parse_candidate(text, name=f"{a.id}.cu")

    # -- gating -----------------------------------------------------------------------------
    def _gate_batch(self, batch: list[Attempt]) -> None:
        """Gate the batch's pending attempts (in parallel on several GPUs; the time limit checked
        before each), then spend what is left of each tuned proposal's budget in rounds (greedy:
        one step of neighbours).  On resume ``batch`` also holds the iteration's attempts gated
        before the kill."""
        todo = [a for a in batch if a.status == "pending"]
        if todo:
            cands = [self._candidate(a) for a in todo]
            self.gate.precompile(cands)
            self._gate_all(todo, cands)
        if self.config.refine and batch and not self._time_up():
            if self.strategy.name == "greedy":
                self._refine(batch)
            else:
                self._more_rounds(batch)
        if self.config.dispatch and batch and not self._time_up():
            self._propose_dispatch(batch)

    def _gate_all(self, attempts: list[Attempt], cands: list[Candidate]) -> None:
        """Every verdict is recorded as it arrives; what a time limit left stays pending."""
        try:
            self.gate.evaluate_many(cands, should_stop=self._time_up,
                                    on_result=lambda i, ev: self._apply(attempts[i], ev, soon=True))
        finally:
            self._write_history()

    def _setting_attempt(self, top: Attempt, cand: Candidate, d: dict, rationale: str,
                         like: Attempt | None = None) -> Attempt:
        """A further setting of a tuned proposal (``like``: one of its attempts), derived from the
        setting ``top``."""
        like = like or top
        c = cand.with_defines(d)
        a = Attempt(id=f"a{len(self.state.attempts):04d}", iteration=self.state.iteration, proposer=like.proposer,
                    label=like.label, parent=top.id, rationale=rationale, defines=dict(d),
                    launch=c.launch.to_json() if c.launch else like.launch, tunables=like.tunables,
                    direction=like.direction, model_calls=list(like.model_calls), technique=like.technique,
                    second_parent=like.second_parent)
        a.source_file = f"attempts/{a.id}.cu"
        a.sha256 = c.sha256
        self.run_dir.write_text(a.source_file, c.render())
        self.state.attempts.append(a)
        self._remember(a, c)
        return a

    def _refine(self, batch: list[Attempt]) -> None:
        """Greedy: gate the untried neighbours of the best setting of each tuned proposal (one step)."""
        extra = []
        for members in search.refine_groups(batch):
            top = min(members, key=lambda x: x.score_us)
            cand = self._candidate(top)
            for d in search.refine(cand, top.defines, exclude=self._tried(cand)):
                extra.append(self._setting_attempt(top, cand, d, f"neighbour of {top.id}"))
        if extra:
            self._gate_all(extra, [self._candidate(a) for a in extra])
        batch.extend(extra)

    def _propose_dispatch(self, batch: list[Attempt]) -> None:
        """Settings per shape (dispatch_fit.py): for each tuned proposal of the batch, the simplest
        dispatch rule over its gated settings, recorded and gated as one more attempt of the batch."""
        from kernel_forge.search.dispatch_fit import propose_rules
        extra: list[Attempt] = []
        for p in propose_rules(batch, self.state.attempts, self.task, candidate=self._candidate,
                               floor=self.config.min_improvement):
            extra += self._record_proposal(p, Slot(direction=p.direction))
        todo = [a for a in extra if a.status == "pending"]
        if todo:
            self._gate_all(todo, [self._candidate(a) for a in todo])
        batch.extend(extra)
    def _more_rounds(self, batch: list[Attempt]) -> None:
        """Rounds of settings picked by the strategy from what the rounds before measured, until
        each tuned proposal that passed once has spent its budget of this iteration (or its space
        is used up, or the time limit passed)."""
        while not self._time_up():
            groups: dict[str, list[Attempt]] = {}
            for a in batch:
                if a.tunables and a.reason not in NOT_GATED and a.proposer != "initial" and not a.dispatch:
                    groups.setdefault(a.label, []).append(a)
            extra = []
            for label, members in groups.items():
                if not any(m.status == "passed" for m in members):
                    continue
                budget = self._allot.get(label, self.config.tune_budget)
                k = min(budget - len(members), self.strategy.round_size(budget, True))
                if k <= 0:
                    continue
                cand = self._candidate(members[0])
                space = self._space(cand, label)
                by_id = {a.id: a for a in self.state.attempts}
                best = space.best()
                top = by_id[best.attempt] if best else members[0]
                for d, why in self.strategy.pick(space, k, self._rng(label, len(members))):
                    extra.append(self._setting_attempt(top, cand, d, f"search {self.strategy.name}: {why}",
                                                       like=members[0]))
            if not extra:
                return
            self._write_history()
            self._gate_all(extra, [self._candidate(a) for a in extra])
            batch.extend(extra)

    def _gate_attempt(self, a: Attempt, roles=("correctness", "performance")) -> Evaluation:
        ev = self.gate.evaluate(self._candidate(a), roles=roles)
        self._apply(a, ev)
        return ev

    def _apply(self, a: Attempt, ev: Evaluation, *, soon: bool = False) -> None:
        """Record a verdict on its attempt and write the history at once (``soon``: within
        HISTORY_EVERY_S of the last write; the batch's end writes what is left)."""
        a.evaluation = ev.to_json()
        a.status = "passed" if ev.passed else "failed"
        a.reason, a.message, a.score_us = ev.reason, ev.message, ev.score_us
        if not soon or time.monotonic() - self._history_written >= HISTORY_EVERY_S:
            self._write_history()
        mark = f"{ev.score_us:9.2f} µs" if ev.passed and ev.score_us else f"{a.reason}"
        if a.reason == "harness_error":     # kernel_forge's fault: said so, never fed back as the kernel's
            mark += f" (kernel_forge's own fault, not the kernel's: {ev.message[:160]})"
        where = f" (GPU {ev.device})" if ev.device is not None and ev.device != 0 else ""
        self.progress(f"[kforge]   {a.id} {a.proposer:>10} {a.label[:28]:28} "
                      f"{' '.join(f'{k}={v}' for k, v in sorted(a.defines.items()))[:40]:40} {mark}{where}")

    # -- recording the iteration ------------------------------------------------------------
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
        self._iteration_line()

    def _profile(self, a: Attempt | None, *, final: bool = False) -> None:
        """Profile a best once (``profiles/<id>.json``); the seconds it took go to the state.  Only
        a prompt shows profiles, so without one only the ``final`` best is profiled (for the report)."""
        if a is None or not self.config.profile or a.profile:
            return
        if not final and not self.proposer.needs_prompt:
            return
        names = [c.name for c in self.task.cases if c.role == "performance"]
        t0 = time.monotonic()
        try:
            prof = self.gate.profile(self._candidate(a), names)
        except KForgeError as exc:
            prof = {"available": False, "reason": f"profiling failed: {exc}", "tool": "", "seconds": 0.0, "cases": {}}
        seconds = round(time.monotonic() - t0, 3)
        from kernel_forge.gate.profiler import save_profile
        a.profile = save_profile(self.run_dir, a.id, {**prof, "wall_seconds": seconds})
        self.state.profile_seconds[a.id] = seconds
        self._write_history()
        self.progress(f"[kforge]   profiled {a.id} with {prof.get('tool') or 'no tool'} in {seconds:.1f} s"
                      if prof.get("available") else f"[kforge]   no profile of {a.id}: {prof.get('reason', '')}")

    # -- stop rules -------------------------------------------------------------------------
    def time_limit(self) -> tuple[float | None, str]:
        """The run's time limit and where it comes from: --time-limit, else the built-in tuner's
        default (--tune-time-limit), else none."""
        c = self.config
        if c.time_limit_s is not None:
            return c.time_limit_s, "--time-limit"
        if self._is_tuner() and c.tune_time_limit_s:
            return c.tune_time_limit_s, "the built-in tuner's default time limit (--tune-time-limit; --time-limit sets any run's)"
        return None, ""

    def _time_up(self) -> bool:
        """The time limit is checked before every candidate, not only between iterations."""
        limit, _ = self.time_limit()
        return limit is not None and self.state.elapsed() >= limit

    def _time_stop(self) -> StopRun:
        limit, source = self.time_limit()
        return StopRun("time_limit", f"{self.state.elapsed():.0f} s of {limit:g} s ({source})"
                       + (f"; search so far: {self.search_line()}" if self._is_tuner() else ""))

    def iteration_limit(self) -> int | None:
        """--max-iterations, or its default: 7 for models and replays, none for the built-in tuner."""
        return iteration_limit(self.config, self.proposer.name)

    def _check_stop(self) -> None:
        c = self.config
        limit = self.iteration_limit()
        if limit is not None and self.state.iteration >= limit:
            raise StopRun("max_iterations", f"{self.state.iteration} of --max-iterations {limit}"
                          + (f"; search so far: {self.search_line()}" if self._is_tuner() else ""))
        if c.budget_limit is not None and self.state.cost_usd >= c.budget_limit:
            raise StopRun("budget_usd")
        if c.max_tokens is not None and self.state.tokens["input"] + self.state.tokens["output"] >= c.max_tokens:
            raise StopRun("max_tokens")
        if self._time_up():
            raise self._time_stop()
        if c.patience is not None and self.state.since_improvement >= c.patience:
            raise StopRun("patience")
        if c.target_speedup is not None and self.state.speedup() >= c.target_speedup:
            raise StopRun("target_speedup")
        if c.roof_stop:
            reached, detail = self.roof_reached(c.roof_stop)
            if reached:
                raise StopRun("roof_stop", detail)

    def roof_reached(self, share: float) -> tuple[bool, str]:
        """Whether the best is at ``share`` or more of the roof that applies on every performance
        case (the larger of its share of the measured bandwidth and of the compute peak: the
        roofline's attainable time over the measured one), and the figures."""
        if self.state.best is None or not self.state.best.evaluation:
            return False, ""
        diag = self._diagnosis()
        parts = []
        for case in self.task.cases_with("performance"):
            d = diag.case(case.name)
            if d is None:
                return False, f"case {case.name} has no timing"
            figs = [(p, what) for p, what in ((d.pct_bandwidth, "of the measured bandwidth"),
                                             (d.pct_compute, f"of the {diag.peak['label'] if diag.peak else 'compute'} peak"))
                    if p is not None]
            if not figs:
                return False, f"case {case.name} has no roof (no cost model or no device figures)"
            pct, what = max(figs)
            if pct < 100.0 * share:
                return False, f"case {case.name} at {pct:.1f}% {what}"
            parts.append(f"{case.name} {pct:.1f}% {what}")
        return True, (f"the best ({self.state.best.id}) is at >= {100 * share:.0f}% of its roof on every "
                      "performance case: "
                      + "; ".join(parts))

    # -- prompt -----------------------------------------------------------------------------
    def _source(self, a: Attempt) -> str:
        return (self.run_dir.path / a.source_file).read_text(encoding="utf-8")

    def _source_or_none(self, a: Attempt | None) -> str | None:
        """The attempt's kernel for the diagnosis (None when it has none or it cannot be read)."""
        try:
            return self._source(a) if a is not None and a.source_file else None
        except (OSError, UnicodeDecodeError):
            return None

    def _prompt_attempt(self, a: Attempt, *, profile: bool = False) -> PromptAttempt:
        parent = next((x for x in self.state.attempts if x.id == a.parent), None)
        return feedback.prompt_attempt(a, source=self._source(a), parent_source=self._source(parent) if parent else None,
                                       default_launch=self.task.launch.to_json() if self.task.launch else None,
                                       profile=self._profile_of(a) if profile else None)

    def _profile_of(self, a: Attempt) -> dict | None:
        return self.run_dir.read_json(a.profile) if a.profile else None

    def _diagnosis(self):
        """The diagnosis of the current best (computed once per best and profile)."""
        if self._diag is None or self._diag[:2] != (self.state.best.id, self.state.best.profile):
            diag = diagnose(self.task, self.state.best.evaluation or {},
                            initial=self.state.initial.evaluation if self.state.initial else None,
                            baselines=self.state.baselines,
                            device=self.gate.device_info(), calibration=self.gate.calibrate(),
                            profile=self._profile_of(self.state.best), source=self._source_or_none(self.state.best))
            self._diag = (self.state.best.id, self.state.best.profile, diag)
        return self._diag[2]

    def _diagnosis_of(self, a: Attempt):
        """The diagnosis of any passed attempt (a parent the strategy starts from), cached."""
        key = (a.id, a.profile)
        if key not in self._diags:
            self._diags[key] = diagnose(self.task, a.evaluation or {},
                                        initial=self.state.initial.evaluation if self.state.initial else None,
                                        baselines=self.state.baselines, device=self.gate.device_info(),
                                        calibration=self.gate.calibrate(), profile=self._profile_of(a),
                                        source=self._source_or_none(a))
        return self._diags[key]

    def _request(self, slots: list[Slot], iteration: int, *, profile: bool = False) -> ProposalRequest:
        """The request for one iteration: a shared static prefix and one dynamic prompt per slot.
        ``profile``: first profile every kernel a prompt starts from or combines that has no
        profile yet (a dry run does not, and its prompts say which have none)."""
        dirs = [s.direction for s in slots]
        best = self.state.best
        plan = dict(directions=dirs, parents=[(s.parent or best).id if (s.parent or best) else "" for s in slots],
                    techniques=[s.technique for s in slots], seconds=[s.second.id if s.second else None for s in slots],
                    spent=self._spent() if self._is_tuner() else [],
                    passed=sorted({a.label for a in self.state.attempts if a.status == "passed"}) if self._is_tuner() else [])
        if not self.proposer.needs_prompt:
            return ProposalRequest(system="", prompt="", n=len(slots), iteration=iteration, **plan)
        if translation.translating(self.state):
            return translation.request(self, slots, iteration)
        c = self.config
        body = lambda a: self.bodies.get(a.id, a.id)  # noqa: E731
        shown = feedback.choose_shown(self.state.attempts, self.state.best, self.state.initial, iteration=iteration,
                                      body=body,
                                      size=lambda a: len(self._source(a)), history_in_prompt=c.history_in_prompt,
                                      history_chars=c.history_chars, failures_in_prompt=c.failures_in_prompt,
                                      crossover_every=c.crossover_every if self.strategy.crossover_in_prompt else 0)
        if profile:             # every kernel a proposal starts from or combines is shown profiled
            for parent in self._parents(slots) + [x for x in shown.crossover or () if x.status == "passed"]:
                self._profile(parent)
        ledger = reflection.ledger_section(self.state.attempts, noise=c.min_improvement, profile=self._profile_of,
                                           task=self.task)
        common = dict(reference_source=self.task.reference.path.read_text(encoding="utf-8"),
                      device=self.gate.device_info(), calibration=self.gate.calibrate(),
                      best=self._prompt_attempt(self.state.best, profile=True), hints=c.hints,
                      n_history=c.history_in_prompt,
                      diagnosis=self._diagnosis(), retrieved=tuple(self.retrieved.examples), ledger=ledger,
                      bound=self._prompt_attempt(self._bound()) if self._bound() else None)
        # what every proposal shares comes first and is the same text in each prompt: a kernel a
        # proposal starts from (other than the best) is shown in that proposal's own section, and
        # the failures to fix in theirs, so neither is listed among the shared ones; the initial
        # kernel is not shown once another kernel beats it
        own = {x.id for s in slots for x in (s.parent, s.second) if x is not None and x is not self.state.best}
        fixed = {body(s.fix) for s in slots if s.fix}
        history = [self._prompt_attempt(a) for a in shown.history if a.id not in own
                   and (a is not self.state.initial or self.state.best is self.state.initial)]
        failures = [self._prompt_attempt(a) for a in shown.failures if body(a) not in fixed]
        shared_cross = tuple(map(self._prompt_attempt, shown.crossover)) if shown.crossover else None
        static, prompts = "", []
        for s in slots:
            cross = (self._prompt_attempt(s.parent), self._prompt_attempt(s.second)) if s.second else shared_cross
            start = ""
            if s.parent is not None and s.parent is not self.state.best and s.fix is None and s.second is None:
                start = reflection.start_section(self._prompt_attempt(s.parent, profile=True), self.state.best,
                                                 self._diagnosis_of(s.parent),
                                                 refs=prompts_mod.pattern_refs(self.retrieved.examples))
            static, dynamic = build_prompt_parts(self.task, failures=failures, direction=s.direction,
                                                 fix=self._prompt_attempt(s.fix) if s.fix else None,
                                                 crossover=cross, start=start, **common, history=history)
            prompts.append(dynamic)
        parents = [self._source(s.fix or s.parent or self.state.best) for s in slots]
        return ProposalRequest(system=system_prompt(), prompt=prompts[0] if prompts else "", n=len(slots),
                               iteration=iteration, static_prefix=static, prompts=prompts,
                               parent_sources=parents, **plan)

    def _prompt(self) -> str:
        """The full user prompt the first proposal of the next iteration would get."""
        return self.next_request().full_prompt(0)

    # -- evidence ---------------------------------------------------------------------------
    def _write_history(self) -> None:
        """Save the history: the first save of this process writes it whole as the log's first
        line, every later one appends the state and the attempts that changed since the last."""
        self._history_written = time.monotonic()
        changed = self.state.take_changes()
        if self.history_log.started:
            self.history_log.append(self.state.to_json(attempts=changed))
        else:
            self.history_log.start(self._history())

    def _history(self) -> dict:
        """history.json's content: the whole history."""
        return {"task": self.task.name, "kernel_forge": __version__, **self.state.to_json()}

    def _write_best(self) -> None:
        import hashlib
        from pathlib import Path

        from kernel_forge.common.reads import Unreadable, read_input_bytes

        best_cu = self.run_dir.write_text("best.cu", self._source(self.state.best))
        # a request replays from any folder, and only against the manifest and kernel it was written for
        manifest = Path(self.task.path).resolve()
        if not hasattr(self, "_manifest_sha256"):      # read once: the task is fixed for the run
            try:
                self._manifest_sha256 = hashlib.sha256(read_input_bytes(manifest, "manifest")).hexdigest()
            except Unreadable:                          # gone since the start: its requests cannot check it
                self._manifest_sha256 = None
        hashes = {"kernel_sha256": hashlib.sha256(best_cu.read_bytes()).hexdigest()}
        if self._manifest_sha256:
            hashes["manifest_sha256"] = self._manifest_sha256
        ev = self.state.best.evaluation or {}
        for c in ev.get("cases", []):
            if c.get("role") == "holdout":
                continue
            self.run_dir.write_json(f"best-case-{c['name']}.json", {
                "manifest": str(manifest), **hashes, "kernel": "best.cu", "attempt": self.state.best.id,
                "case": c["name"], "role": c["role"], "seeds": c.get("seeds", []),
                # under a dispatch rule: the setting this case ran with, and which rule line gave it
                "defines": (c.get("variant") or {}).get("defines", self.state.best.defines),
                "variant": c.get("variant"),
                "launch": c.get("launch"), "median_us": (c.get("timing") or {}).get("median"),
                "command": f"kforge replay {self.run_dir.path / ('best-case-' + c['name'] + '.json')}"})

    def _iteration_line(self) -> None:
        rejected: dict[str, int] = {}
        for a in self.state.attempts:
            if a.status == "failed":
                rejected[a.reason] = rejected.get(a.reason, 0) + 1
        rej = ", ".join(f"{k} {v}" for k, v in sorted(rejected.items())) or "none"
        gated = sum(a.evaluation is not None for a in self.state.attempts)
        best = (f"best {self.state.best.id} x{self.state.speedup():.2f} vs initial" if self.state.best
                else "no baseline yet")
        limit = self.iteration_limit()
        self.progress(f"[kforge] iteration {self.state.iteration}{f'/{limit}' if limit else ''}: {gated} gated, "
                      f"rejected: {rej}; {best}; "
                      f"${self.state.cost_usd:.4f}, {self.state.tokens['input'] + self.state.tokens['output']} tokens")
        if self._is_tuner():
            self.progress(f"[kforge]   search {self.strategy.name}: {self.search_line()}")

    def _finish(self) -> dict:
        from kernel_forge.reports.summary import write_summary

        # the final holdout check: not after an error, nor after Ctrl-C (the resumed run does it)
        if (self.state.best is not None and self.state.best is not self.state.initial
                and self.state.stop_reason not in ("error", "interrupted")):
            selection.final_holdout(self.gate, self.state.best, self._candidate)
        if self.state.stop_reason not in ("error", "interrupted"):
            self._profile(self.state.best, final=True)
        if self.state.best is not None:
            self._write_best()
        self._write_history()                   # the log holds it all, should history.json fail
        self.history_log.finish(self._history())
        summary = write_summary(self.state, self.task, self.run_dir, proposer=self.proposer.name,
                                search=self.search_summary(), gate=self.gate)
        if (self.config.archive or "").lower() != "off" and self.state.stop_reason != "interrupted":
            from kernel_forge.archive.harvest import record_run
            record_run(self.run_dir.path, path=self.config.archive, task=self.task, progress=self.progress)
        self.progress(f"[kforge] stopped: {self.state.stop_reason}. "
                      f"Best {summary['best']['id'] if summary.get('best') else '-'}"
                      f" x{self.state.speedup():.2f} vs initial. Evidence: {self.run_dir.path}")
        if self.state.stop_detail:
            self.progress(f"[kforge] {self.state.stop_detail}")
        left = [a for a in self.state.attempts if a.status == "pending"]
        if left and self.state.stop_reason == "time_limit":
            self.progress(f"[kforge] {len(left)} candidate(s) left ungated; to gate them: "
                          f"kforge optimize --resume {self.run_dir.path} --time-limit LONGER")
        return summary
