"""The request of an iteration (:func:`build_request`): one :class:`ProposalSlot` per slot, each
with its own prompt where the proposer reads one -- the shared static prefix, what the
iteration's proposals share (the best and its diagnosis, earlier kernels, failures, the ledger)
and the slot's own part (a fix, a parent other than the best, two parents to combine) -- or the
translation prompt while the run has no baseline (:func:`translation_request`)."""
from __future__ import annotations

from dataclasses import replace

from kernel_forge.model.verdict import NOT_THE_KERNELS_FAULT
from kernel_forge.proposers.base import ProposalRequest, ProposalSlot
from kernel_forge.records.attempt import Attempt
from kernel_forge.search import feedback, reflection, translation
from kernel_forge.search.prompt_blocks import PromptAttempt, pattern_refs
from kernel_forge.search.prompts import PromptContext, build_prompt_parts, system_prompt
from kernel_forge.search.run_context import RunContext
from kernel_forge.search.slots import Slot, bound_of, parents_of


def prompt_attempt(run: RunContext, a: Attempt, *, profile: bool = False) -> PromptAttempt:
    """The attempt as a prompt shows it (``profile``: with its profile)."""
    parent = next((x for x in run.state.attempts if x.id == a.parent), None)
    return feedback.prompt_attempt(a, source=run.kernels.source(a),
                                   parent_source=run.kernels.source(parent) if parent else None,
                                   default_launch=run.task.launch.to_json() if run.task.launch else None,
                                   profile=run.diagnoses.profile_of(a) if profile else None)


def build_request(run: RunContext, slots: list[Slot], iteration: int, *, profile: bool = False) -> ProposalRequest:
    """The request for one iteration: a shared static prefix and one dynamic prompt per slot.
    ``profile``: first profile every kernel a prompt starts from or combines that has no
    profile yet (a dry run does not, and its prompts say which have none)."""
    state, best = run.state, run.state.best
    plan = [ProposalSlot(direction=s.direction, parent=(s.parent or best).id if (s.parent or best) else "",
                         technique=s.technique, second_parent=s.second.id if s.second else None) for s in slots]
    tuner = dict(spent=run.spaces.spent(state.attempts),
                 passed=sorted({a.label for a in state.attempts if a.status == "passed"})) if run.is_tuner else {}
    if not run.proposer.needs_prompt:
        return ProposalRequest(system="", prompt="", n=len(slots), iteration=iteration, slots=plan, **tuner)
    if translation.translating(state):
        return translation_request(run, slots, iteration)
    static, prompts = _prompts(run, slots, iteration, profile=profile)
    for p, text, s in zip(plan, prompts, slots):
        p.prompt, p.parent_source = text, run.kernels.source(s.fix or s.parent or best)
    return ProposalRequest(system=system_prompt(), prompt=prompts[0] if prompts else "", n=len(slots),
                           iteration=iteration, static_prefix=static, slots=plan, **tuner)


def _prompts(run: RunContext, slots: list[Slot], iteration: int, *, profile: bool) -> tuple[str, list[str]]:
    """The static prefix and each slot's dynamic prompt."""
    c, state = run.config, run.state
    body = run.kernels.body
    shown = feedback.choose_shown(state.attempts, state.best, state.initial, iteration=iteration, body=body,
                                  size=lambda a: len(run.kernels.source(a)), history_in_prompt=c.history_in_prompt,
                                  history_chars=c.history_chars, failures_in_prompt=c.failures_in_prompt,
                                  crossover_every=c.crossover_every if run.strategy.crossover_in_prompt else 0)
    if profile:             # every kernel a proposal starts from or combines is shown profiled
        for parent in parents_of(slots) + [x for x in shown.crossover or () if x.status == "passed"]:
            run.profile(parent)
    show = lambda a: prompt_attempt(run, a)  # noqa: E731
    # what every proposal shares comes first and is the same text in each prompt: a kernel a
    # proposal starts from (other than the best) is shown in that proposal's own section, and
    # the failures to fix in theirs, so neither is listed among the shared ones; the initial
    # kernel is not shown once another kernel beats it
    own = {x.id for s in slots for x in (s.parent, s.second) if x is not None and x is not state.best}
    fixed = {body(s.fix) for s in slots if s.fix}
    bound = bound_of(state.attempts)
    shared = PromptContext(
        run.task, reference_source=run.task.reference.path.read_text(encoding="utf-8"),
        device=run.gate.device_info(), calibration=run.gate.calibrate(),
        best=prompt_attempt(run, state.best, profile=True), hints=c.hints, n_history=c.history_in_prompt,
        diagnosis=run.diagnoses.of_best(state), retrieved=tuple(run.retrieved.examples),
        ledger=reflection.ledger_section(state.attempts, noise=c.min_improvement, profile=run.diagnoses.profile_of,
                                         task=run.task),
        bound=show(bound) if bound else None,
        history=[show(a) for a in shown.history if a.id not in own
                 and (a is not state.initial or state.best is state.initial)],
        failures=[show(a) for a in shown.failures if body(a) not in fixed])
    shared_cross = tuple(map(show, shown.crossover)) if shown.crossover else None
    static, prompts = "", []
    for s in slots:
        start = ""
        if s.parent is not None and s.parent is not state.best and s.fix is None and s.second is None:
            start = reflection.start_section(prompt_attempt(run, s.parent, profile=True), state.best,
                                             run.diagnoses.of(s.parent, state),
                                             refs=pattern_refs(run.retrieved.examples))
        static, dynamic = build_prompt_parts(replace(
            shared, direction=s.direction, fix=show(s.fix) if s.fix else None, start=start,
            crossover=(show(s.parent), show(s.second)) if s.second else shared_cross))
        prompts.append(dynamic)
    return static, prompts


def translation_request(run: RunContext, slots: list[Slot], iteration: int) -> ProposalRequest:
    """The request of a translation iteration: one prompt per slot (a fix turn or a direction)."""
    c = run.config
    recent: dict[str, Attempt] = {}
    for a in reversed(run.state.attempts):   # a harness or reference failure is not the kernel's: never shown as one
        if a.status == "failed" and a.reason not in NOT_THE_KERNELS_FAULT and len(recent) < c.failures_in_prompt:
            recent.setdefault(run.kernels.body(a), a)
    failures = [prompt_attempt(run, a) for a in reversed(list(recent.values()))]
    common = dict(reference_source=run.task.reference.path.read_text(encoding="utf-8"),
                  device=run.gate.device_info(), calibration=run.gate.calibrate(), hints=c.hints)
    static, plan = "", []
    for s in slots:
        fix = prompt_attempt(run, s.fix) if s.fix else None
        static, dynamic = translation.prompt_parts(run.task, failures=failures, fix=fix, direction=s.direction,
                                                   **common)
        # a fix turn may answer with edits against the failed translation; a new one has no parent
        plan.append(ProposalSlot(prompt=dynamic, direction=s.direction,
                                 parent_source=run.kernels.source(s.fix) if s.fix else ""))
    return ProposalRequest(system=system_prompt(), prompt=plan[0].prompt if plan else "", n=len(slots),
                           iteration=iteration, static_prefix=static, slots=plan)
