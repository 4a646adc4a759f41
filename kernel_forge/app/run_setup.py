"""Assemble a run of ``kforge optimize``: config, proposer, gate, run folder; and resume it."""
from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlsplit

from kernel_forge import __version__
from kernel_forge.common.errors import InputError, InternalError
from kernel_forge.evidence.run_dir import RunDir, environment_fingerprint
from kernel_forge.config.build import InFile, build
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.config.sections import command_line
from kernel_forge.gate.gate import Gate
from kernel_forge.search.loop import Optimizer
from kernel_forge.proposers.ensemble import EnsembleProposer
from kernel_forge.model.task import Task, load_task


def check_proposer(cfg: ProposerConfig) -> None:
    """What the option types cannot say about a ProposerConfig (an :class:`InputError` naming the
    option, before any GPU probe or model call)."""
    from kernel_forge.proposers.models import parse_model_spec
    from kernel_forge.proposers.options import ProviderOptions, names, only_for
    from kernel_forge.proposers.pricing import PriceTable

    if cfg.replay and cfg.models:
        raise InputError("--replay and --model are exclusive: a run replays recorded proposals or asks models")
    providers = {parse_model_spec(m)[0] for m in cfg.models}
    if cfg.base_url is not None:
        parts = urlsplit(cfg.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"--base-url (proposer.base_url) {cfg.base_url!r} is not an http:// or https:// URL",
                             hint="e.g. --base-url http://localhost:8000/v1 (vLLM) or http://localhost:11434/v1 (Ollama)")
        if not cfg.models:
            raise InputError("--base-url (proposer.base_url) needs --model: the model the endpoint serves",
                             hint="e.g. --model openai:qwen2.5-coder:32b --base-url http://localhost:8000/v1")
    if cfg.server != "auto" and (cfg.base_url is None or "openai" not in providers):
        raise InputError(f"--server {cfg.server} (proposer.server) names the OpenAI-compatible server behind "
                         "--base-url: it needs --base-url and an openai:MODEL model")
    if cfg.models:
        defaults = ProviderOptions()
        for name in names():             # an option only one provider takes, given for a run without it
            only = only_for(name)
            if only is not None and only not in providers and getattr(cfg, name) != getattr(defaults, name):
                raise InputError(f"{command_line().place('proposer', name)} (proposer.{name}) applies to "
                                 f"{only}:MODEL models only; the run asks {', '.join(cfg.models)}")
    if cfg.thinking is not None and cfg.thinking_budget is not None:
        raise InputError("give --thinking-budget (manual extended thinking) or --thinking, not both")
    if cfg.reasoning_effort in ("none", "minimal") and "anthropic" in providers:
        raise InputError(f"--reasoning-effort {cfg.reasoning_effort}: Anthropic models take low, medium, high, "
                         "xhigh or max (output_config.effort)")
    if cfg.max_tokens_cap is not None and cfg.max_tokens is not None and cfg.max_tokens_cap < cfg.max_tokens:
        raise InputError(f"--max-output-tokens-cap ({cfg.max_tokens_cap}) is below --max-output-tokens "
                         f"({cfg.max_tokens})")
    PriceTable(cfg.prices or None, where="$.proposer.prices")   # malformed overrides fail here, naming the entry


def unpriced_models(cfg: ProposerConfig) -> list[str]:
    """The models of ``cfg`` with no price in the table or its overrides."""
    from kernel_forge.proposers.models import parse_model_spec
    from kernel_forge.proposers.pricing import PriceTable

    table = PriceTable(cfg.prices or None)
    return [m for m in cfg.models if table.lookup(*parse_model_spec(m)) is None]


def run_budget(loop, cfg: ProposerConfig) -> float | None:
    """What the run's model calls are held to: ``--budget-usd`` (0: no limit).  The default
    (:data:`~kernel_forge.config.loop_settings.DEFAULT_BUDGET_USD`) is not applied to a model with no price,
    whose cost cannot be counted (the budget line says so); a budget given for one is refused by
    :func:`check_budget_prices`."""
    from kernel_forge.config.loop_settings import DEFAULT_BUDGET_USD

    usd = loop.budget_limit
    if usd is not None and cfg.models and usd == DEFAULT_BUDGET_USD and unpriced_models(cfg):
        return None
    return usd


def check_budget_prices(cfg: ProposerConfig, budget_usd: float | None) -> None:
    """A budget can only stop a run whose every model is priced, and must hold at least one call of
    each model at its worst case: refuse to start otherwise, with the figures."""
    if budget_usd is None or not cfg.models:
        return
    from kernel_forge.proposers.models import parse_model_spec
    from kernel_forge.proposers.pricing import PriceTable

    table = PriceTable(cfg.prices or None)
    missing = [m for m in cfg.models if table.lookup(*parse_model_spec(m)) is None]
    if missing:
        example = missing[0].strip().lower()
        raise InputError(
            f"--budget-usd {budget_usd:g}: no price is known for {', '.join(missing)}, so its cost "
            "cannot be counted and the budget could never stop the run",
            hint=f'give its prices (USD per million tokens) in the --config file: {{"proposer": {{"prices": '
                 f'{{"{example}": {{"input": 0.5, "output": 1.5}}}}}}}} (see kernel_forge/data/models.json), '
                 "or drop --budget-usd")
    for spec in cfg.models:
        worst = first_call_worst_case(cfg, spec, table)
        if worst is not None and worst[0] > budget_usd:
            usd, limit, tokens_in, price = worst
            raise InputError(
                f"--budget-usd {budget_usd:g}: one request to {spec} may cost up to ${usd:.4f} "
                f"({limit} output tokens at ${price.output:g}/M, plus about {tokens_in} prompt tokens at up to "
                f"${price.highest_input_rate():g}/M), more than the whole budget; no call was made",
                hint="raise --budget-usd, lower --max-output-tokens (the model needs room to think and to write "
                     "a whole kernel), or choose a cheaper model")


def first_call_worst_case(cfg: ProposerConfig, spec: str, table=None):
    """(usd, output limit, prompt tokens estimated, price) of the dearest first request to
    ``spec``: its output limit as the proposer would send it, the system prompt as its input."""
    from kernel_forge.search.prompts import system_prompt
    from kernel_forge.proposers.budget import estimate_tokens
    from kernel_forge.proposers.models import make_model_proposer, parse_model_spec
    from kernel_forge.proposers.options import options_of
    from kernel_forge.proposers.pricing import PriceTable

    table = table or PriceTable(cfg.prices or None)
    provider, model = parse_model_spec(spec)
    price = table.lookup(provider, model)
    if price is None:
        return None
    probe = make_model_proposer(spec, options_of(cfg), prices=table, api_key="budget-probe")
    tokens_in = estimate_tokens(system_prompt())
    return table.worst_case(provider, model, tokens_in, probe.max_tokens).usd, probe.max_tokens, tokens_in, price


def make_proposer(cfg: ProposerConfig, task: Task, history: list[dict] | None = None, *,
                  budget_usd: float | None = None, spent_usd: float = 0.0):
    """The run's proposer; with ``budget_usd`` every model call is checked against what is left of it
    (``spent_usd``: what an earlier part of a resumed run spent)."""
    history = history or []
    if cfg.replay:
        from kernel_forge.proposers.replay import ReplayProposer
        # every replayed proposal has a unique label (file name or FILE:LINE)
        labels = {a.get("label") for a in history if a.get("proposer") == "replay"}
        return ReplayProposer(cfg.replay, skip=len(labels))
    check_proposer(cfg)
    if cfg.models:
        from kernel_forge.proposers.budget import Budget
        from kernel_forge.proposers.models import make_model_proposer
        from kernel_forge.proposers.options import options_of
        budget = Budget(budget_usd, spent_usd) if budget_usd is not None else None
        members = [make_model_proposer(m, options_of(cfg), prices=cfg.prices or None, budget=budget)
                   for m in cfg.models]
        return EnsembleProposer(members, cfg.ensemble)
    from kernel_forge.search.bound import bound_templates
    from kernel_forge.search.tuner import TuneProposer
    done = len({a.get("label") for a in history if a.get("proposer") == "tune"})
    bound = bound_templates(task, listed_templates(task))   # the task's kind's patterns, written for its own signature
    return TuneProposer(tuner_search(task, bound.templates), skip=done, bound=bound.templates)


def listed_templates(task) -> list:
    """The task's templates, else the expert patterns that carry its exact signature."""
    templates = list(getattr(task, "templates", ()) or ())
    if not templates:
        from kernel_forge.kinds.fit import tuner_templates
        templates = tuner_templates(task)
    return templates


def tuner_search(task, bound: list | None = None) -> list:
    """What the built-in tuner searches on ``task`` besides its bound patterns (``bound``, from
    :func:`kernel_forge.search.bound.bound_templates`): its templates (else the expert patterns that
    carry its exact signature), then the user's own kernel (its tune lines; or a space derived from
    it when nothing else fits: :func:`kernel_forge.search.tuner.own_templates`)."""
    from kernel_forge.search.tuner import own_templates

    templates = listed_templates(task)
    return templates + own_templates(task, templates + list(bound or ()))


def baseline_kind(task: Task, prop: ProposerConfig) -> str:
    """What a run's speedups are measured against: ``initial`` (the task's initial kernel), else
    ``translation`` (the first passing translation of a model or replay) or ``template`` (the
    tuner's first passing template setting)."""
    if task.initial is not None:
        return "initial"
    return "template" if prop.kind == "tune" else "translation"


def check_baseline(task: Task, prop: ProposerConfig) -> None:
    """A task without an initial kernel needs proposals that can become its baseline."""
    if task.initial is None and prop.kind == "tune" and not task.templates:
        raise InputError(f"{task.path}: the task has no initial kernel and no templates, so the built-in tuner has "
                         "nothing to start from",
                         hint="give a model (--model anthropic:MODEL or openai:MODEL) or --replay to translate the "
                              "reference into a first kernel, or add \"initial\" to the manifest")


def spent_of(hist: dict) -> float:
    """What a recorded run's model calls cost so far (its history's state)."""
    try:
        return float((hist.get("state") or {}).get("cost_usd", 0.0) or 0.0)
    except (TypeError, ValueError, AttributeError):
        return 0.0


def _budget_kw(budget_usd: float | None, spent_usd: float) -> dict:
    """make_proposer's budget arguments (none without a budget)."""
    return {} if budget_usd is None else {"budget_usd": budget_usd, "spent_usd": spent_usd}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _settings(run: RunDir, overrides: dict | None):
    """(LoopConfig, GateOptions, ProposerConfig) of a recorded run: its run.json's sections through
    the one validator (a hand-edited bad value is named by run.json's JSON path, in the words a
    command line or config file gets), then the run's loop ``overrides`` (already checked)."""
    meta = run.read_json("run.json", check=False)
    if not isinstance(meta, dict) or not all(isinstance(meta.get(s), dict) for s in ("loop", "gate", "proposer")):
        run.read_json("run.json")                # the schema names what is missing or not an object
    where = InFile(str(run.path / "run.json"))
    loop = build(LoopConfig, overrides or {}, command_line(), base=build(LoopConfig, meta["loop"], where))
    return loop, build(GateOptions, meta["gate"], where), build(ProposerConfig, meta["proposer"], where)


def make_gate(task: Task, gate_opts: GateOptions):
    """The gate a run uses: one GPU, or a :class:`~kernel_forge.gate.pool.GatePool` over
    ``gate_opts.devices`` (one worker per GPU, an iteration's candidates gated in parallel)."""
    if gate_opts.devices.strip() in ("", str(gate_opts.device)):
        gate = Gate(task, gate_opts)
    else:
        from kernel_forge.gate.pool import GatePool, parse_devices
        from kernel_forge.gpu.driver import device_count

        gate = GatePool.for_devices(task, gate_opts, parse_devices(gate_opts.devices, device_count()))
    gate.ensure_gpu()
    return gate


def _retrieval(task: Task, loop: LoopConfig, gate, progress):
    """What the archive gives a new run (with it off: only the expert pattern of the task's kind)."""
    from kernel_forge.kinds.fit import classify
    from kernel_forge.search.retrieval import Retrieved, retrieve_for_run, with_pattern

    if (loop.archive or "").lower() == "off":
        return Retrieved(examples=with_pattern([], task, loop.archive_examples), kind=dict(vars(classify(task))))
    device = gate.device_info() or {}
    return retrieve_for_run(task, path=loop.archive, k=loop.archive_examples, max_chars=loop.archive_chars,
                            gpu=device.get("name"), progress=progress)


def start_run(manifest: str | Path, loop: LoopConfig, gate_opts: GateOptions, prop: ProposerConfig,
              runs_dir: str | Path = "runs", progress=lambda m: None, *, gate=None, proposer=None) -> Optimizer:
    """A new run folder and its optimizer.  ``gate`` and ``proposer`` replace the ones built from
    ``gate_opts`` and ``prop`` (anything with their interface: tests pass fakes, embedders their own)."""
    from kernel_forge.authoring.acceptance import check_usable

    task = load_task(manifest)
    review = check_usable(task, progress)       # a generated task: accepted or edited, or exit 2 here
    from kernel_forge.gate.preflight import check_task_kernels, launch_limits
    check_task_kernels(task, launch_limits(gate_opts.arch))     # every launch it starts from, before the GPU
    check_budget_prices(prop, run_budget(loop, prop))
    if proposer is None:
        check_baseline(task, prop)
        proposer = make_proposer(prop, task, **_budget_kw(run_budget(loop, prop), 0.0))
    if gate is None:
        gate = make_gate(task, gate_opts)
    run = RunDir.create(runs_dir)
    run.write_json("run.json", {
        "task": task.name, "manifest": str(Path(manifest).resolve()), "kernel_forge": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": sys.argv,
        "hashes": {"task": task.hash(), "manifest": _sha(task.path), "reference": _sha(task.reference.path),
                   "initial": _sha(task.initial) if task.initial is not None else None, "harness": harness_hash()},
        "loop": loop.to_json(), "gate": asdict(gate_opts), "proposer": asdict(prop),
        "baseline": baseline_kind(task, prop), "generated": review.evidence() if review is not None else None})
    run.write_json("manifest.json", task.raw)
    run.write_json("env.json", environment_fingerprint(gate.device_info(), gate.calibrate()))
    retrieved = _retrieval(task, loop, gate, progress)
    run.write_json("retrieval.json", retrieved.to_json())
    return Optimizer(task, gate, proposer, run, loop, progress=progress, retrieved=retrieved)


def recorded_run(path: str | Path, overrides: dict | None):
    """(RunDir, run.json, task, its settings) of a recorded run whose task has not changed since."""
    run = RunDir.open(path)
    loop, gate_opts, prop = _settings(run, overrides)
    meta = run.read_json("run.json")
    task = load_task(meta["manifest"])
    if task.hash() != meta["hashes"]["task"]:
        raise InputError(f"{meta['manifest']} or its reference changed since {run.path.name} started; "
                         "a run cannot go on against a different task", hint="start a new run instead")
    return run, meta, task, (loop, gate_opts, prop)


def resume_run(path: str | Path, progress=lambda m: None, overrides: dict | None = None, *, gate=None) -> Optimizer:
    run, meta, task, (loop, gate_opts, prop) = recorded_run(path, overrides)
    check_budget_prices(prop, run_budget(loop, prop))
    from kernel_forge.evidence.history_log import read_history

    hist = read_history(run, {}) or {}
    proposer = make_proposer(prop, task, hist.get("attempts", []),
                             **_budget_kw(run_budget(loop, prop), spent_of(hist)))
    if gate is None:
        gate = make_gate(task, gate_opts)
    from kernel_forge.search.retrieval import Retrieved
    retrieved = Retrieved.from_json(run.read_json("retrieval.json"))   # the same examples as at its start
    return Optimizer(task, gate, proposer, run, loop, progress=progress, retrieved=retrieved)


class _PromptOnly:
    """The proposer of a dry run: reads prompts, is never asked."""

    name = "dry-run"
    needs_prompt = True

    def propose(self, request):
        raise InternalError("a dry run asks no model")


def next_prompt_parts(path: str | Path, overrides: dict | None = None) -> tuple[str, str, list[str]]:
    """(system, static prefix, the dynamic part of every proposal) a model would be asked for in
    the next iteration of the recorded run at ``path`` (its attempts, ledger, best and the
    recorded profiles), built without a GPU and without a call: the run's verdicts stand in for the
    gate (:class:`~kernel_forge.gate.recorded.RecordedGate`).  Whatever proposed the run (the
    built-in tuner too), the prompts are the ones a model would get from here; a parent the run
    never profiled is said to have no profile (a real run profiles it before asking)."""
    from kernel_forge.gate.recorded import RecordedGate
    from kernel_forge.search.retrieval import Retrieved

    run, _meta, task, (loop, _gate, _prop) = recorded_run(path, overrides)
    from kernel_forge.evidence.history_log import read_history

    read_history(run)                  # checked against its schema: a damaged one is exit 2 here
    opt = Optimizer(task, RecordedGate.from_run(run.path), _PromptOnly(), run, loop,
                    retrieved=Retrieved.from_json(run.read_json("retrieval.json")))
    if not opt.load_recorded() or opt.best is None:
        raise InputError(f"{run.path}: no attempt recorded yet; for the first prompt: kforge optimize MANIFEST --dry-run")
    req = opt.next_request()
    return req.system, req.static_prefix, [req.prompt_for(i) for i in range(req.n)]


#: what a dry run's first prompt cannot show, said in it where the diagnosis would be
UNMEASURED = ("dry run: nothing was run, so this prompt lacks what a real run's first prompt shows here: the initial "
              "kernel's median per case, the vendor baselines' times, each case's roofline bound and limit with "
              "the Nsight Compute profile, and directions drawn from that diagnosis (those below are the generic "
              "ones)")


def first_prompt_parts(manifest: str | Path, hints: str = "", device_file: str | Path | None = None,
                       candidates: int = 1) -> tuple[str, str, list[str]]:
    """(system, static prefix, the dynamic part of each of ``candidates`` proposals) of a run's
    first model request, built without a GPU: the initial kernel stands as the unmeasured best and
    the prompt says what a real run would have measured (:data:`UNMEASURED`).  With
    ``device_file`` (a device description, e.g. kernel_forge/data/devices/h200.json) the device
    section is complete and the initial kernel is compiled with NVRTC for its arch, so the prompt
    shows its registers, shared memory, occupancy and waves per case; without it the device
    section says it is unknown."""
    from kernel_forge.search.prompt_blocks import PromptAttempt
    from kernel_forge.search.prompts import PromptContext, build_prompt_parts, system_prompt

    task = load_task(manifest)
    device = calibration = None
    if task.initial is None:               # the first call translates the reference
        from kernel_forge.search import translation
        if device_file is not None:
            from kernel_forge.gpu.device_description import load
            device, calibration = load(device_file)
        dynamic = []
        for d in translation.directions(max(1, candidates)):
            static, dyn = translation.prompt_parts(
                task, reference_source=task.reference.path.read_text(encoding="utf-8"), device=device,
                calibration=calibration, failures=[], hints=hints, direction=d)
            dynamic.append(dyn)
        return system_prompt(), static, dynamic
    log = ""
    if device_file is not None:
        from kernel_forge.gpu.device_description import load
        device, calibration = load(device_file)
        try:
            from kernel_forge.gpu.nvrtc import compile_source
            log = compile_source(task.initial.read_text(encoding="utf-8"), arch=device["arch"],
                                 file_label=task.initial.name, headers=task.header_sources()).log
        except Exception:  # noqa: BLE001 - no NVRTC here, or it does not compile: the prompt says less
            log = ""
    from kernel_forge.gate.preflight import check_task_kernels, launch_limits
    check_task_kernels(task, launch_limits(device=device))     # never a prompt for a kernel that cannot run
    from kernel_forge.search.retrieval import pattern_example

    best = PromptAttempt(id="initial", source=task.initial.read_text(encoding="utf-8"), passed=True,
                         reason="passed", message="", score_us=None, compile_log=log)
    from kernel_forge.analysis.diagnosis import Diagnosis
    from kernel_forge.analysis.directions import direction_items

    pattern = pattern_example(task)
    diag = Diagnosis(notes=[UNMEASURED])
    dynamic = []
    for _, direction in direction_items(diag, max(1, candidates)):
        static, dyn = build_prompt_parts(PromptContext(
            task, reference_source=task.reference.path.read_text(encoding="utf-8"), device=device,
            calibration=calibration, best=best, history=[], failures=[], hints=hints,
            retrieved=(pattern,) if pattern else (), diagnosis=diag, direction=direction))
        dynamic.append(dyn)
    return system_prompt(), static, dynamic


def first_prompt(manifest: str | Path, hints: str = "", device_file: str | Path | None = None) -> tuple[str, str]:
    """The system and user prompts of a run's first model call (see :func:`first_prompt_parts`)."""
    system, static, dynamic = first_prompt_parts(manifest, hints, device_file)
    return system, static + "\n\n" + dynamic[0]


def harness_hash() -> str:
    """Hash of kernel_forge's own source: which harness produced the evidence."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()
