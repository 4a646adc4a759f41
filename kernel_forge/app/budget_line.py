"""What a run may spend at most, said before it starts: model calls, tokens, dollars and time.

:func:`estimate` works from the configuration alone (no GPU, no call): for models, every
iteration's ``candidates`` proposals, each with the three calls a proposal can take (asked once;
once more with the larger output limit when its answer is cut off; one repair turn when it is
unusable, whose input is the prompt plus the answer it quotes); each call's input at most the
prompt's bounded parts (system prompt, task and device, reference, best and its diagnosis,
history, failures, the fix target, crossover, the expert pattern, the kernel a proposal starts
from, archive examples, the ledger, the hints, the request's own JSON) at 3 characters a token
(the count the check before each call uses), every token at the dearest input rate (a cache write
where that is dearer); its output at most the output limit the proposer sends (thinking
included); dollars from the capability table's prices (:mod:`kernel_forge.proposers.pricing`).
Attempts that fail mid-answer are billed on top, as they happen, and counted against the budget.  For the built-in tuner: the settings its
templates have and the most the iterations can gate, and the time limit it runs under.
:func:`render` words it for the terminal.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

#: characters per token assumed for the estimate: the per-call check's count (code and English
#: average about 3.5-4, so this over-counts)
CHARS_PER_TOKEN = 3
#: calls a proposal can take: the first answer, the retry of a cut-off one, one repair turn
CALLS_PER_PROPOSAL = 3


def _fixed_chars() -> dict[str, int]:
    """Bounded prompt parts that are not configuration fields (prompt_blocks.py's and reflection.py's
    limits, with room for their headings and the lines around each source)."""
    from kernel_forge.search import prompt_blocks as p

    return {"task and device": 6000, "best and its diagnosis": p.MAX_SOURCE_CHARS + 4000 + 3000,
            "failures": p.FAILURES_CHARS + 2000, "fix target": p.MAX_SOURCE_CHARS + p.FAILURE_CHARS + 1500,
            "crossover": 10000 + 1000, "expert pattern": p.PATTERN_CHARS + 1000, "start": 12000 + 3000,
            "ledger": 8000, "direction and job": 1500, "request JSON and tool schema": 6000}


@dataclass
class Budget:
    kind: str                                  # "models" | "tune" | "replay"
    iterations: int = 0
    proposals: int = 0                         # models: proposals asked in the worst case
    calls: int = 0                             # models: HTTP answers counted in the worst case
    input_tokens_per_call: int = 0
    output_tokens_per_call: tuple[int, int] = (0, 0)   # first answer, the retry of a cut-off one
    tokens: int = 0                            # all calls together
    usd: float | None = None                   # None: a model without a price
    per_model: dict = field(default_factory=dict)   # spec -> {"usd", "input", "output"} per million
    unpriced: list[str] = field(default_factory=list)
    settings: int | None = None                # tune: settings its templates have (None: unknown)
    settings_cap: int | None = 0               # tune: the most the iterations can gate (None: no iteration limit)
    time_limit_s: float | None = None
    time_source: str = ""
    budget_usd: float | None = None
    unbounded: str = ""                        # why the default budget does not apply
    spent_usd: float = 0.0                     # a resumed run: what its calls cost before
    max_tokens: int | None = None
    searched: list = field(default_factory=list)   # tune: (label, origin, settings, what) of each kernel searched


def _prompt_chars(loop, task=None) -> int:
    from kernel_forge.search.prompt_blocks import HISTORY_CHARS, REFERENCE_CHARS, RETRIEVED_CHARS

    system = len(resources.files("kernel_forge").joinpath("prompts/system.md").read_text())
    reference = REFERENCE_CHARS
    if task is not None:
        try:
            reference = min(reference, len(task.reference.path.read_text(encoding="utf-8")))
        except OSError:
            pass
    return (system + reference + sum(_fixed_chars().values()) + max(loop.history_chars, HISTORY_CHARS)
            + max(loop.archive_chars, RETRIEVED_CHARS) + len(loop.hints or ""))


def estimate(loop, prop, task=None) -> Budget:
    """The worst case of a run with these settings (``loop``: LoopConfig, ``prop``: ProposerConfig)."""
    from kernel_forge.search.stop_rules import iteration_limit

    iterations = iteration_limit(loop, prop.kind)          # None: the tuner without --max-iterations
    from kernel_forge.app.run_setup import run_budget, unpriced_models

    b = Budget(kind=prop.kind, iterations=iterations or 0, budget_usd=run_budget(loop, prop),
               max_tokens=loop.max_tokens)
    if loop.budget_limit is not None and b.budget_usd is None and prop.kind == "models":
        b.unbounded = (f"the default --budget-usd {loop.budget_limit:g} does not apply: no price is known for "
                       f"{', '.join(unpriced_models(prop))}, so its cost cannot be counted (give its prices in the "
                       "config to bound it)")
    if loop.time_limit_s is not None:
        b.time_limit_s, b.time_source = loop.time_limit_s, "--time-limit"
    elif prop.kind == "tune" and loop.tune_time_limit_s:
        b.time_limit_s, b.time_source = loop.tune_time_limit_s, "the tuner's default, --tune-time-limit"
    if prop.kind == "tune":
        searched = []
        if task is not None:
            from kernel_forge.app.run_setup import listed_templates, tuner_search
            from kernel_forge.common.errors import KForgeError
            from kernel_forge.search.bound import bound_templates
            from kernel_forge.search.tuner import TunerTemplate

            try:
                bound = bound_templates(task, listed_templates(task)).templates
                searched = [TunerTemplate.of(t) for t in tuner_search(task, bound)]
                searched += [TunerTemplate(name=p.name, text=p.read_text(encoding="utf-8"), origin="bound", path=p)
                             for p in bound]
                b.searched = [(t.name, t.origin, t.settings(), t.what) for t in searched]
                b.settings = sum(n for _, _, n, _ in b.searched)
            except (KForgeError, OSError):
                b.settings = None
        b.settings_cap = (iterations * loop.tune_budget * max(1, len(searched)) if iterations else None)
        return b
    if prop.kind != "models":
        return b
    from kernel_forge.proposers.models import make_model_proposer, parse_model_spec
    from kernel_forge.proposers.options import options_of
    from kernel_forge.proposers.pricing import PriceTable

    per_iteration = loop.candidates * (len(prop.models) if prop.ensemble == "parallel" else 1)
    b.proposals = iterations * per_iteration
    b.calls = CALLS_PER_PROPOSAL * b.proposals
    b.input_tokens_per_call = _prompt_chars(loop, task) // CHARS_PER_TOKEN
    table = PriceTable(prop.prices or None)
    # proposals per model: all of them each iteration (parallel), or every len(models)-th iteration
    n = (iterations if prop.ensemble == "parallel" else -(-iterations // len(prop.models))) \
        * loop.candidates
    total, outs = 0.0, []
    for spec in prop.models:
        provider, model = parse_model_spec(spec)
        # the output limits as the proposer sends them (the capability table's, or the options')
        probe = make_model_proposer(spec, options_of(prop), prices=table, api_key="budget-probe")
        # the retry of a cut-off answer asks for twice the limit, up to the cap; a repair turn keeps the
        # limit of the answer it repairs and quotes that answer (thinking included) in its input
        first = probe.max_tokens
        retry = max(first, min(probe.max_tokens_cap, 2 * first))
        outs.append((first, retry))
        tokens_in = b.input_tokens_per_call
        b.tokens += n * (tokens_in + first + 2 * (tokens_in + retry + retry))
        price = table.lookup(provider, model)
        if price is None:
            b.unpriced.append(spec)
            continue
        usd = n * (table.worst_case(provider, model, tokens_in, first).usd
                   + 2 * table.worst_case(provider, model, tokens_in + retry, retry).usd)
        b.per_model[spec] = {"usd": usd, "input": price.input, "output": price.output}
        total += usd
    b.output_tokens_per_call = max(outs)
    b.usd = None if b.unpriced else total
    return b


def recorded_budget(path, overrides: dict | None = None) -> Budget:
    """The budget line's figures (:func:`kernel_forge.app.budget_line.estimate`) of a recorded run as it
    would go on, with what its calls cost so far."""
    from kernel_forge.app.run_setup import recorded_run, spent_of
    from kernel_forge.evidence.history_log import read_history

    run, _meta, task, (loop, _gate_opts, prop) = recorded_run(path, overrides)
    b = estimate(loop, prop, task)
    b.spent_usd = spent_of(read_history(run, {}) or {})     # the log of a killed run, else history.json
    return b


def _tok(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _searched(item) -> str:
    label, origin, n, what = item
    if origin == "own tune lines":
        return f"{label}'s own tune lines ({n})"
    if origin == "derived":
        return f"{label} derived from the initial kernel: {what} ({n})"
    if origin == "bound":
        return f"{label} bound to the task's signature, gated at its default first ({n})"
    return f"{label} ({n})"


def render(b: Budget) -> list[str]:
    """The budget as the lines ``kforge optimize`` prints before it starts."""
    time = (f"time: at most {b.time_limit_s:g} s ({b.time_source})" if b.time_limit_s is not None
            else "time: no limit (--time-limit S sets one)")
    if b.kind == "tune":
        if b.settings == 0 or (b.settings is not None and not b.searched):
            return [f"[kforge] budget: the built-in tuner has nothing to search (no template, no expert pattern of "
                    f"this signature, no tune lines in the initial kernel and nothing in it safe to tune); {time}"]
        names = "; ".join(_searched(s) for s in b.searched)
        have = f"{b.settings} settings in the task's templates" if b.settings is not None else "its templates' settings"
        if b.searched:
            have = f"{b.settings} settings: {names}"
        if b.settings_cap is None:
            most = (f"{b.settings} settings (every setting of {names or 'its templates'})" if b.settings is not None
                    else "every setting of its templates")
            return [f"[kforge] budget: the built-in tuner gates at most {most}, no model calls, $0; {time}"]
        return [f"[kforge] budget: the built-in tuner gates at most {min(b.settings_cap, b.settings or b.settings_cap)} "
                f"settings ({have}; {b.iterations} iterations x --tune-budget per template), no model calls, $0; {time}"]
    if b.kind == "replay":
        return [f"[kforge] budget: replayed proposals, no model calls, $0; at most {b.iterations} iterations; {time}"]
    lines = [f"[kforge] budget (worst case, before it starts): {b.iterations} iterations x {b.proposals // max(1, b.iterations)} "
             f"proposals = {b.proposals} proposals, at most {b.calls} model calls (a cut-off answer is asked once more, "
             f"an unusable one repaired once); about {_tok(b.input_tokens_per_call)} input + "
             f"{_tok(b.output_tokens_per_call[0])} output tokens a call ({_tok(b.output_tokens_per_call[1])} on a retry "
             f"or repair, whose input also holds the answer it quotes), at most {_tok(b.tokens)} tokens in all"]
    if b.usd is not None:
        prices = "; ".join(f"{m} ${p['input']:g}/${p['output']:g} per M in/out" for m, p in b.per_model.items())
        lines.append(f"[kforge]   at most ${b.usd:.2f} ({prices}; prompt caching would lower it)")
    else:
        lines.append(f"[kforge]   dollars: unknown — no price for {', '.join(b.unpriced)} (add it under proposer.prices "
                     "in --config)")
    stops = []
    if b.budget_usd is not None:
        stops.append(f"--budget-usd {b.budget_usd:g} stops it at ${b.budget_usd:.2f}"
                     + (f" (${b.spent_usd:.2f} spent before this resume)" if b.spent_usd else "")
                     + ("; --budget-usd 0 lifts it" if b.usd is not None and b.usd > b.budget_usd else ""))
    elif b.unbounded:
        stops.append(b.unbounded)
    elif b.kind == "models":
        stops.append("no --budget-usd limit")
    if b.max_tokens is not None:
        stops.append(f"--max-tokens {b.max_tokens} stops it at {_tok(b.max_tokens)} tokens")
    lines.append(f"[kforge]   {time}" + (f"; {'; '.join(stops)}" if stops else ""))
    return lines
