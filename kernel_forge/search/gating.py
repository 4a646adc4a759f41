"""Gating an iteration's attempts: every pending one (in parallel on several GPUs, the time limit
checked before each, every verdict recorded as it arrives), then what is left of each tuned
proposal's settings budget in rounds (greedy: one step of neighbours), then a dispatch rule
fitted over each tuned proposal's settings, and a composite of kernels where different kernels
are the fastest on different performance cases."""
from __future__ import annotations

from kernel_forge.model.candidate import Candidate
from kernel_forge.records.attempt import NOT_GATED, Attempt
from kernel_forge.search import spaces
from kernel_forge.search.recording import apply, record_proposal, setting_attempt
from kernel_forge.search.run_context import RunContext
from kernel_forge.search.slots import Slot
from kernel_forge.search.stop_rules import time_up


def gate_batch(run: RunContext, batch: list[Attempt]) -> None:
    """Gate the batch's pending attempts, then spend what is left of each tuned proposal's budget.
    On resume ``batch`` also holds the iteration's attempts gated before the kill."""
    todo = [a for a in batch if a.status == "pending"]
    if todo:
        cands = [run.kernels.candidate(a) for a in todo]
        run.gate.precompile(cands)
        gate_all(run, todo, cands)
    if run.config.refine and batch and not time_up(run):
        if run.strategy.name == "greedy":
            _refine(run, batch)
        else:
            _more_rounds(run, batch)
    if run.config.dispatch and batch and not time_up(run):
        _propose_dispatch(run, batch)


def gate_all(run: RunContext, attempts: list[Attempt], cands: list[Candidate]) -> None:
    """Every verdict is recorded as it arrives; what a time limit left stays pending."""
    try:
        run.gate.evaluate_many(cands, should_stop=lambda: time_up(run),
                               on_result=lambda i, ev: apply(run, attempts[i], ev, soon=True))
    finally:
        run.save()


def _gate_new(run: RunContext, batch: list[Attempt], extra: list[Attempt]) -> None:
    todo = [a for a in extra if a.status == "pending"]
    if todo:
        gate_all(run, todo, [run.kernels.candidate(a) for a in todo])
    batch.extend(extra)


def _refine(run: RunContext, batch: list[Attempt]) -> None:
    """Greedy: gate the untried neighbours of the best setting of each tuned proposal (one step)."""
    extra = []
    for members in spaces.refine_groups(batch):
        top = min(members, key=lambda x: x.score_us)
        cand = run.kernels.candidate(top)
        for d in spaces.refine(cand, top.defines, exclude=run.kernels.tried(cand, run.state.attempts)):
            extra.append(setting_attempt(run, top, cand, d, f"neighbour of {top.id}"))
    _gate_new(run, batch, extra)


def _propose_dispatch(run: RunContext, batch: list[Attempt]) -> None:
    """Settings per shape (dispatch_fit.py): for each tuned proposal of the batch, the simplest
    dispatch rule over its gated settings, recorded and gated as one more attempt of the batch."""
    from kernel_forge.search.dispatch_fit import propose_rules

    extra: list[Attempt] = []
    for p in propose_rules(batch, run.state.attempts, run.task, candidate=run.kernels.candidate,
                           floor=run.config.min_improvement):
        extra += record_proposal(run, p, Slot(direction=p.direction))
    _gate_new(run, batch, extra)
    _propose_composite(run, batch)


def _propose_composite(run: RunContext, batch: list[Attempt]) -> None:
    """A kernel per shape (dispatch_fit.propose_composite): where different kernels are each the
    fastest on some performance case, one source holding them, gated as one more attempt."""
    from kernel_forge.search.dispatch_fit import propose_composite

    if time_up(run) or not any(a.status == "passed" for a in batch):
        return
    p = propose_composite(run.state.attempts, run.task, candidate=run.kernels.candidate,
                          floor=run.config.min_improvement)
    if p is not None:
        _gate_new(run, batch, record_proposal(run, p, Slot(direction=p.direction)))


def _more_rounds(run: RunContext, batch: list[Attempt]) -> None:
    """Rounds of settings picked by the strategy from what the rounds before measured, until
    each tuned proposal that passed once has spent its budget of this iteration (or its space
    is used up, or the time limit passed)."""
    state, strategy = run.state, run.strategy
    while not time_up(run):
        groups: dict[str, list[Attempt]] = {}
        for a in batch:
            if a.tunables and a.reason not in NOT_GATED and a.proposer != "initial" and not a.dispatch:
                groups.setdefault(a.label, []).append(a)
        extra = []
        for label, members in groups.items():
            if not any(m.status == "passed" for m in members):
                continue
            budget = run.spaces.budget(label)
            k = min(budget - len(members), strategy.round_size(budget, True))
            if k <= 0:
                continue
            cand = run.kernels.candidate(members[0])
            space = run.spaces.space(cand, label, state.attempts)
            by_id = {a.id: a for a in state.attempts}
            best = space.best()
            top = by_id[best.attempt] if best else members[0]
            for d, why in strategy.pick(space, k, run.spaces.rng(state.iteration, label, len(members))):
                extra.append(setting_attempt(run, top, cand, d, f"search {strategy.name}: {why}", like=members[0]))
        if not extra:
            return
        run.save()
        gate_all(run, extra, [run.kernels.candidate(a) for a in extra])
        batch.extend(extra)
