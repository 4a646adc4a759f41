"""How a run starts and resumes: its recorded history read back (:func:`load_recorded`), the
task's initial kernel gated as the baseline, with a model the task's bound pattern gated once,
the vendor baselines timed, and the iteration a kill interrupted found again
(:func:`unsettled_batch`)."""
from __future__ import annotations

from kernel_forge.common.errors import KForgeError
from kernel_forge.evidence.history_log import read_history
from kernel_forge.proposers.base import Proposal
from kernel_forge.records.attempt import Attempt
from kernel_forge.records.run_state import RunState
from kernel_forge.search import selection
from kernel_forge.search.recording import gate_attempt, record_proposal
from kernel_forge.search.run_context import RunContext
from kernel_forge.search.slots import Slot
from kernel_forge.search.stop_rules import time_stop, time_up


def load_recorded(run: RunContext) -> bool:
    """The run's recorded attempts and state from its history (history.jsonl, else history.json;
    nothing is written); False when there is none yet."""
    hist = read_history(run.run_dir)
    if hist:
        run.state = RunState.from_json(hist, started=run.state.started)
        for a in run.state.attempts:
            if a.proposer == "initial" and a.status == "pending" and a is not run.state.initial:
                # an earlier release recorded every setting of an initial kernel's tune lines
                # as pending attempts that nothing ever gated (the run stalled on them)
                a.status, a.reason = "failed", "duplicate"
                a.message = "a further setting of the initial kernel recorded by an earlier release; " \
                            "the tuner searches the initial kernel's settings itself"
            run.kernels.remember(a)
    return bool(hist)


def evaluate_initial(run: RunContext) -> None:
    """Gate the task's initial kernel on every role; it is the run's baseline and first best."""
    state = run.state
    a = state.initial
    if a is None:
        source = run.task.initial.read_text(encoding="utf-8")
        a = record_proposal(run, Proposal(source=source, rationale="the task's initial kernel", proposer="initial",
                                          label=run.task.initial.name), Slot())[0]
        state.initial = a
    ev = gate_attempt(run, a, roles=("correctness", "performance", "holdout"))
    if not ev.passed:
        run.save()
        raise KForgeError(f"the task's initial kernel fails the gate ({ev.reason}): {ev.message}",
                          hint="fix the initial kernel or the manifest first: kforge eval MANIFEST")
    a.best = a.baseline = True
    state.best = a
    run.save()


def evaluate_bound(run: RunContext) -> None:
    """With a model: gate the pattern of the task's kind bound to its signature once, at its
    default setting (:mod:`kernel_forge.search.bound`); the prompt shows it with its time and
    offers it as a second parent, and it becomes the best if it is faster."""
    from kernel_forge.search.bound import bound_templates, gate_label, gate_source

    state = run.state
    if any(a.proposer == "bound" for a in state.attempts):
        return
    found = bound_templates(run.task, run.task.templates)
    for note in found.notes:
        run.progress(f"[kforge] {note}")
    batch = []
    for path in found.templates:
        prop = Proposal(source=gate_source(path.read_text(encoding="utf-8")), proposer="bound",
                        label=gate_label(path), rationale=f"the {found.match.kind} pattern bound to this "
                        "task's signature, at its default setting")
        for a in record_proposal(run, prop, Slot()):
            if a.status == "pending":
                gate_attempt(run, a)
            batch.append(a)
    new = selection.maybe_move_best(run.gate, state.best, batch, run.rules, candidate=run.kernels.candidate,
                                    save=run.save) if batch else None
    if new is not None:
        new.best, state.best = True, new
        run.write_best()
    run.save()


def time_baselines(run: RunContext) -> None:
    """Time the task's vendor baselines once a run."""
    if run.state.baselines:
        return
    for name in run.task.baselines:
        run.progress(f"[kforge] timing vendor baseline {name}")
        ev = run.gate.evaluate_baseline(name)
        run.state.baselines[name] = ev.to_json(with_samples=False)
    run.save()


def unsettled_batch(run: RunContext) -> list[Attempt] | None:
    """The iteration a kill interrupted: gate what is pending without asking again, then decide
    the best over the whole iteration (its gated attempts included).  None when settled."""
    state = run.state
    pending = [a for a in state.attempts if a.status == "pending"]
    if not pending and state.settled:
        return None
    if pending and time_up(run):
        raise time_stop(run)         # left pending: --resume with a longer limit gates them
    if pending:
        state.iteration = pending[0].iteration
    return [a for a in state.attempts if a.iteration == state.iteration and a.proposer != "initial"]
