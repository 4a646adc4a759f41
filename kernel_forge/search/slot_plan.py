"""The slots of an iteration (:func:`plan_slots`): fix turns for the failed proposals of the
iteration before, then, while the run has no baseline, translation directions, else the search
strategy's parents and directions (from each parent's diagnosis), with the task's bound pattern as
a second parent where it wins a case over a slot's parent."""
from __future__ import annotations

from kernel_forge.model.verdict import NOT_THE_KERNELS_FAULT
from kernel_forge.records.attempt import Attempt
from kernel_forge.search import translation
from kernel_forge.search.lineage import PlanContext, technique_of, wins_over
from kernel_forge.search.run_context import RunContext
from kernel_forge.search.slots import Slot, bound_of, fix_chain


def plan_slots(run: RunContext, iteration: int) -> list[Slot]:
    """The ``candidates`` slots of ``iteration``: fix turns first, then, while translating, the
    translation directions, else the search strategy's parents and directions, with the bound
    pattern as one slot's second parent where it wins a case over that slot's parent."""
    n, state = run.config.candidates, run.state
    if run.is_tuner:
        return [Slot() for _ in range(n)]
    by_id = {a.id: a for a in state.attempts}
    fixes = fixes_of(run, iteration - 1)[:n]
    slots = []
    for f in fixes:
        root = fix_chain(f, state.attempts)[-1]
        slots.append(Slot(direction=f"fix {f.id} ({f.reason}), keeping its approach"
                          + (f": {root.direction}" if root.direction else ""), fix=f, parent=f,
                          technique=technique_of(root, by_id)))
    if translation.translating(state):      # no baseline yet: translation directions, no parents
        return slots + [Slot(direction=d) for d in translation.directions(n - len(fixes))]
    for p in run.strategy.plan(plan_context(run, iteration), n - len(fixes)):
        slots.append(Slot(direction=p.direction, parent=p.parent, second=p.second, technique=p.technique))
    bound = bound_of(state.attempts)        # the bound pattern as a second parent, once an iteration
    if bound is not None and bound is not state.best and not any(s.second for s in slots):
        # only where it is faster than the slot's parent on some case: else it has nothing to give
        s = next((s for s in slots if s.fix is None and (s.parent or state.best) is not bound
                  and wins_over(bound, s.parent or state.best, run.config.min_improvement)), None)
        if s is not None:
            s.second, s.technique = bound, s.technique or "crossover"
    return slots


def plan_context(run: RunContext, iteration: int) -> PlanContext:
    """What the strategy reads to plan ``iteration``."""
    c, state = run.config, run.state
    return PlanContext(attempts=state.attempts, best=state.best, initial=state.initial, iteration=iteration,
                       body=run.kernels.body, options=lambda parent, k: run.diagnoses.options(parent, k, state),
                       crossover_every=c.crossover_every, min_improvement=c.min_improvement, seed=c.seed)


def fixes_of(run: RunContext, iteration: int) -> list[Attempt]:
    """Proposals of ``iteration`` whose every setting failed and that have a fix turn left."""
    if run.config.fix_turns <= 0:
        return []
    groups: dict[str, list[Attempt]] = {}
    for a in run.state.attempts:
        if a.iteration == iteration and a.proposer != "initial":
            groups.setdefault(a.label, []).append(a)
    out = []
    for members in groups.values():
        first = members[0]
        if all(m.status == "failed" for m in members) and first.reason != "duplicate" \
                and first.reason not in NOT_THE_KERNELS_FAULT \
                and len(fix_chain(first, run.state.attempts)) - 1 < run.config.fix_turns:
            out.append(first)
    return out
