"""What a run may spend at most, said before it starts: model calls, tokens, dollars and time.

:func:`estimate` works from the configuration alone (no GPU, no call): for models, every
iteration's ``candidates`` proposals, each asked once and, when its answer is cut off, once more
with the larger output limit; each call's input at most the prompt's bounded parts (system
prompt, task and device, reference, best, diagnosis, history, failures, crossover, the kernel a
proposal starts from, archive examples, the ledger) at about 4 characters a token, every token at
the dearest input rate (a cache write where that is dearer); its output at most the output limit
the proposer sends (thinking included); dollars from the capability table's prices
(:mod:`kernel_forge.proposers.pricing`).  For the built-in tuner: the settings its
templates have and the most the iterations can gate, and the time limit it runs under.
:func:`render` words it for the terminal.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

#: characters per token assumed for the estimate (English and code average about 3.5-4)
CHARS_PER_TOKEN = 4
#: bounded prompt parts that are not configuration fields (see prompts.py and reflection.py)
_FIXED_CHARS = {"task and device": 6000, "best and its diagnosis": 12000 + 4000, "failures": 9000,
                "crossover": 10000, "start": 12000 + 3000, "ledger": 8000, "direction and job": 1500}


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
    max_tokens: int | None = None
    searched: list = field(default_factory=list)   # tune: (label, origin, settings, what) of each kernel searched


def _prompt_chars(loop, task=None) -> int:
    system = len(resources.files("kernel_forge").joinpath("prompts/system.md").read_text())
    reference = 6000
    if task is not None:
        try:
            reference = min(reference, len(task.reference.path.read_text(encoding="utf-8")))
        except OSError:
            pass
    return (system + reference + sum(_FIXED_CHARS.values()) + loop.history_chars + loop.archive_chars)


def estimate(loop, prop, task=None) -> Budget:
    """The worst case of a run with these settings (``loop``: LoopConfig, ``prop``: ProposerConfig)."""
    from kernel_forge.search.loop import iteration_limit

    iterations = iteration_limit(loop, prop.kind)          # None: the tuner without --max-iterations
    b = Budget(kind=prop.kind, iterations=iterations or 0, budget_usd=loop.budget_usd,
               max_tokens=loop.max_tokens)
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
    from kernel_forge.app.run_setup import model_options
    from kernel_forge.proposers.models import make_model_proposer, parse_model_spec
    from kernel_forge.proposers.pricing import PriceTable

    per_iteration = loop.candidates * (len(prop.models) if prop.ensemble == "parallel" else 1)
    b.proposals = iterations * per_iteration
    b.calls = 2 * b.proposals
    b.input_tokens_per_call = _prompt_chars(loop, task) // CHARS_PER_TOKEN
    table = PriceTable(prop.prices or None)
    # proposals per model: all of them each iteration (parallel), or every len(models)-th iteration
    n = (iterations if prop.ensemble == "parallel" else -(-iterations // len(prop.models))) \
        * loop.candidates
    total, outs = 0.0, []
    for spec in prop.models:
        provider, model = parse_model_spec(spec)
        # the output limits as the proposer sends them (the capability table's, or the options')
        probe = make_model_proposer(spec, base_url=prop.base_url, prices=table, api_key="budget-probe",
                                    **model_options(prop))
        first, retry = probe.max_tokens, probe.max_tokens_cap
        outs.append((first, retry))
        b.tokens += n * (2 * b.input_tokens_per_call + first + retry)
        price = table.lookup(provider, model)
        if price is None:
            b.unpriced.append(spec)
            continue
        usd = n * (table.worst_case(provider, model, b.input_tokens_per_call, first).usd
                   + table.worst_case(provider, model, b.input_tokens_per_call, retry).usd)
        b.per_model[spec] = {"usd": usd, "input": price.input, "output": price.output}
        total += usd
    b.output_tokens_per_call = max(outs)
    b.usd = None if b.unpriced else total
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
             f"proposals = {b.proposals} proposals, at most {b.calls} model calls (a cut-off answer is asked once more); "
             f"about {_tok(b.input_tokens_per_call)} input + {_tok(b.output_tokens_per_call[0])} output tokens a call "
             f"({_tok(b.output_tokens_per_call[1])} on a retry), at most {_tok(b.tokens)} tokens in all"]
    if b.usd is not None:
        prices = "; ".join(f"{m} ${p['input']:g}/${p['output']:g} per M in/out" for m, p in b.per_model.items())
        lines.append(f"[kforge]   at most ${b.usd:.2f} ({prices}; prompt caching would lower it)")
    else:
        lines.append(f"[kforge]   dollars: unknown — no price for {', '.join(b.unpriced)} (add it under proposer.prices "
                     "in --config)")
    stops = []
    if b.budget_usd is not None:
        stops.append(f"--budget-usd {b.budget_usd:g} stops it at ${b.budget_usd:.2f}")
    if b.max_tokens is not None:
        stops.append(f"--max-tokens {b.max_tokens} stops it at {_tok(b.max_tokens)} tokens")
    lines.append(f"[kforge]   {time}" + (f"; {'; '.join(stops)}" if stops else ""))
    return lines
