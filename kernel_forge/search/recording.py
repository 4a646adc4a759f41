"""Recording what a proposer answered and what the gate said: its model calls (``model-NNN.json``,
the run's tokens and cost), each proposal as attempts -- one pending attempt per setting to gate,
the archive's settings and the strategy's first round first, or one failed attempt that costs no
GPU time (``launch_conflict``, ``bad_candidate``, ``duplicate``) --, a tuned proposal's further
settings, and each verdict on its attempt (:func:`apply`)."""
from __future__ import annotations

from dataclasses import asdict

from kernel_forge.common.errors import CandidateError
from kernel_forge.model.candidate import Candidate
from kernel_forge.model.verdict import Evaluation
from kernel_forge.proposers.base import ModelCall, Proposal, ProposalResult
from kernel_forge.records.attempt import Attempt
from kernel_forge.search.proposal_candidate import LaunchConflict, candidate_from_proposal
from kernel_forge.search.run_context import RunContext
from kernel_forge.search.slots import Slot


def record_calls(run: RunContext, result: ProposalResult) -> list[str]:
    """Write each model call of ``result`` as ``model-NNN.json`` and add its tokens and cost to
    the run's; the files' names, in order."""
    state, files = run.state, []
    for call in result.calls:
        idx = run.run_dir.next_model_index()
        name = f"model-{idx:03d}.json"
        run.run_dir.write_json(name, {"index": idx, "iteration": state.iteration, **asdict(call)})
        files.append(name)
        state.tokens["input"] += call.input_tokens
        state.tokens["output"] += call.output_tokens
        state.cost_usd += call.cost_usd
        m = state.per_model.setdefault(f"{call.provider}:{call.model}",
                                       {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0})
        m["calls"] += 1
        m["input_tokens"] += call.input_tokens
        m["output_tokens"] += call.output_tokens
        m["cost_usd"] += call.cost_usd
    return files


def calls_of(p: Proposal, result: ProposalResult, files: list[str]) -> list[tuple[str, ModelCall]]:
    """(file, ModelCall) of the calls that produced ``p`` (``Proposal.calls``; a lone proposal
    from a proposer that does not say owns every call of its request)."""
    idx = p.calls if p.calls else (range(len(files)) if len(result.proposals) == 1 else [])
    return [(files[i], result.calls[i]) for i in idx if 0 <= i < len(files)]


def new_attempt(run: RunContext, p: Proposal, slot: Slot, **kw) -> Attempt:
    """The next attempt of the run, of proposal ``p`` answering ``slot`` (appended to the state)."""
    state = run.state
    technique = slot.technique or (f"tune:{p.label}" if p.proposer == "tune" else "")
    a = Attempt(id=f"a{len(state.attempts):04d}", iteration=state.iteration, proposer=p.proposer, label=p.label,
                parent=p.parent, rationale=p.rationale, direction=slot.direction or p.direction,
                fix_of=slot.fix.id if slot.fix else None, technique=technique,
                second_parent=slot.second.id if slot.second else None,
                predicted_speedup=p.predicted_speedup, **kw)
    a.source_file = f"attempts/{a.id}.cu"
    state.attempts.append(a)
    return a


def record_proposal(run: RunContext, p: Proposal, slot: Slot, calls=()) -> list[Attempt]:
    """Write a proposal's attempts: one per setting to gate (pending), or one failed attempt
    (``launch_conflict``, ``bad_candidate``, ``duplicate``) that costs no GPU time."""
    state = run.state
    base_id = f"a{len(state.attempts):04d}"
    p.label = p.label or base_id   # model proposals: a label of their own, so their settings group apart
    out: list[Attempt] = []
    try:
        cand = candidate_from_proposal(p, name=f"{base_id}.cu")
        if int(cand.count_configurations()) == 0:
            raise CandidateError("no setting of its tunables satisfies its constraints", file=cand.name)
    except CandidateError as exc:
        reason = "launch_conflict" if isinstance(exc, LaunchConflict) else "bad_candidate"
        a = new_attempt(run, p, slot, status="failed", reason=reason, message=str(exc))
        run.run_dir.write_text(a.source_file, p.source)
        out.append(a)
    else:
        exclude = run.kernels.tried(cand, state.attempts)
        warm: list[dict] = []
        if p.proposer == "initial":      # the kernel as the user wrote it: its declared setting only
            picked = [(dict(cand.defines), "")]     # (its tune lines are the tuner's to search)
        else:
            # archived settings of this template measured on this GPU go first, then the search's own
            warm = [d for d in run.retrieved.configs_for(cand, p.label)
                    if tuple(sorted(d.items())) not in exclude
                    and cand.dispatch is None]     # a dispatch rule is gated whole, as written
            picked = [(d, "archived") for d in warm] + run.spaces.first_settings(p, cand, warm, exclude,
                                                                                 state.attempts, state.iteration)
        if not picked:
            out.append(duplicate(run, p, slot, cand))
        for d, why in picked:
            out.append(_setting(run, p, slot, cand, d, why, archived=d in warm))
    first = out[0]
    first.model_calls = [f for f, _ in calls]
    first.cost_usd = round(sum(c.cost_usd for _, c in calls), 6)
    first.tokens = {"input": sum(c.input_tokens for _, c in calls), "output": sum(c.output_tokens for _, c in calls)}
    for a in out[1:]:
        a.model_calls = list(first.model_calls)
    return out


def _setting(run: RunContext, p: Proposal, slot: Slot, cand: Candidate, d: dict, why: str, *,
             archived: bool) -> Attempt:
    """One setting ``d`` of a proposal, pending, its kernel written and remembered."""
    c = cand.with_defines(d)
    a = new_attempt(run, p, slot, defines=dict(d), launch=c.launch.to_json() if c.launch else None,
                    tunables={k: list(v) for k, v in c.tunables.items()},
                    dispatch=c.dispatch.to_json() if c.dispatch else None)
    if why and why != "archived":
        a.rationale = f"{a.rationale} [search {run.strategy.name}: {why}]".strip()
    if archived:
        src = run.retrieved.setting_for(p.label, d) or {}
        a.rationale = (f"archived setting #{src.get('id', '?')} from {src.get('run', '?')}/"
                       f"{src.get('attempt', '?')} ({src.get('score_us') or 0:.2f} µs), gated first; "
                       + a.rationale)
    a.sha256 = c.sha256
    run.run_dir.write_text(a.source_file, c.render())
    run.kernels.remember(a, c)
    return a


def duplicate(run: RunContext, p: Proposal, slot: Slot, cand: Candidate) -> Attempt:
    """A failed attempt for a proposal whose every setting an earlier attempt already has."""
    earlier_id = run.kernels.first_with(cand)   # every setting was tried: the default setting's kin
    earlier = next(a for a in run.state.attempts if a.id == earlier_id)
    verdict = (f"passed at {earlier.score_us:.2f} µs" if earlier.status == "passed" and earlier.score_us
               else f"{earlier.status}: {earlier.reason}" if earlier.reason else earlier.status)
    a = new_attempt(run, p, slot, status="failed", reason="duplicate", defines=dict(cand.defines),
                    launch=cand.launch.to_json() if cand.launch else None,
                    tunables={k: list(v) for k, v in cand.tunables.items()},
                    dispatch=cand.dispatch.to_json() if cand.dispatch else None,
                    message=f"the same kernel as {earlier.id} ({verdict}): same normalised source, "
                            "launch and defines; not gated again")
    a.sha256 = cand.sha256
    run.run_dir.write_text(a.source_file, cand.render())
    run.kernels.remember(a, cand)
    run.progress(f"[kforge]   {a.id} {a.proposer:>10} duplicate of {earlier.id}")
    return a


def setting_attempt(run: RunContext, top: Attempt, cand: Candidate, d: dict, rationale: str,
                    like: Attempt | None = None) -> Attempt:
    """A further setting of a tuned proposal (``like``: one of its attempts), derived from the
    setting ``top``."""
    state = run.state
    like = like or top
    c = cand.with_defines(d)
    a = Attempt(id=f"a{len(state.attempts):04d}", iteration=state.iteration, proposer=like.proposer,
                label=like.label, parent=top.id, rationale=rationale, defines=dict(d),
                launch=c.launch.to_json() if c.launch else like.launch, tunables=like.tunables,
                direction=like.direction, model_calls=list(like.model_calls), technique=like.technique,
                second_parent=like.second_parent)
    a.source_file = f"attempts/{a.id}.cu"
    a.sha256 = c.sha256
    run.run_dir.write_text(a.source_file, c.render())
    state.attempts.append(a)
    run.kernels.remember(a, c)
    return a


def gate_attempt(run: RunContext, a: Attempt, roles=("correctness", "performance")) -> Evaluation:
    ev = run.gate.evaluate(run.kernels.candidate(a), roles=roles)
    apply(run, a, ev)
    return ev


def apply(run: RunContext, a: Attempt, ev: Evaluation, *, soon: bool = False) -> None:
    """Record a verdict on its attempt and save the history at once (``soon``: unless it was
    saved a moment ago; the batch's end saves what is left)."""
    a.evaluation = ev.to_json()
    a.status = "passed" if ev.passed else "failed"
    a.reason, a.message, a.score_us = ev.reason, ev.message, ev.score_us
    run.save_soon() if soon else run.save()
    mark = f"{ev.score_us:9.2f} µs" if ev.passed and ev.score_us else f"{a.reason}"
    if a.reason == "harness_error":     # kernel_forge's fault: said so, never fed back as the kernel's
        mark += f" (kernel_forge's own fault, not the kernel's: {ev.message[:160]})"
    where = f" (GPU {ev.device})" if ev.device is not None and ev.device != 0 else ""
    run.progress(f"[kforge]   {a.id} {a.proposer:>10} {a.label[:28]:28} "
                 f"{' '.join(f'{k}={v}' for k, v in sorted(a.defines.items()))[:40]:40} {mark}{where}")
