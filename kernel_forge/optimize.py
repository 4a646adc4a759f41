"""Assemble a run of ``kforge optimize``: config, proposer, gate, run folder; and resume it."""
from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from . import __version__
from .errors import InputError
from .evidence import RunDir, environment_fingerprint
from .gate import Gate, GateOptions
from .loop import LoopConfig, Optimizer
from .proposers.base import ProposalRequest, ProposalResult
from .task import Task, load_task


@dataclass
class ProposerConfig:
    """Where proposals come from, and how models are asked. No model and no replay: the built-in
    tuner.  Every field is a ``kforge optimize`` option and a ``proposer`` config key."""

    models: list[str] = field(default_factory=list)  #: anthropic:MODEL or openai:MODEL; repeat for an ensemble
    base_url: str | None = None                      #: the models' endpoint (http:// or https://): vLLM, Ollama, llama.cpp, a gateway
    ensemble: Literal["round-robin", "parallel"] = "round-robin"  #: several models: one per iteration in turn, or all every iteration
    replay: str | None = None                        #: replay proposals: a folder of .cu files or a JSONL of recorded answers
    prices: dict = field(default_factory=dict)       #: price overrides {"provider:model": {"input": $, "output": $, "cache_read": $, "cache_write": $}} per million tokens
    max_tokens: int = 8192                           #: output tokens per model answer (a thinking budget comes on top)
    max_tokens_cap: int = 32768                      #: most output tokens the one retry of a cut-off answer may ask for
    temperature: float | None = None                 #: sampling temperature; not sent unless set, dropped for the run if the model rejects it
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None  #: OpenAI reasoning_effort / Anthropic output_config.effort (low to max); not sent unless set
    thinking_budget: int | None = None               #: Anthropic extended thinking budget_tokens (>= 1024); thinking makes tool_choice auto
    thinking: Literal["adaptive", "disabled"] | None = None  #: Anthropic thinking mode to send instead of a budget (adaptive: the model decides)
    request_timeout_s: float = 120.0                 #: seconds one model request may take; when streamed, the longest silence between chunks
    timeout_retries: int = 2                         #: further attempts after a model request timed out
    max_attempts: int = 5                            #: HTTP attempts per model request on transient failures (429, 5xx, dropped connections)
    stream: bool = True                              #: stream model answers, so that a long answer cannot outlast the timeout
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None  #: OpenAI API: the field for the output limit (default: max_completion_tokens on api.openai.com, max_tokens elsewhere)
    prompt_cache: bool = True                        #: Anthropic: cache the system prompt and the prompt's static prefix (cache_control)

    @property
    def kind(self) -> str:
        return "replay" if self.replay else ("models" if self.models else "tune")


#: ProposerConfig fields that only one provider's proposers take
ANTHROPIC_ONLY = ("thinking_budget", "thinking", "prompt_cache")
OPENAI_ONLY = ("max_tokens_field",)


def check_proposer(cfg: ProposerConfig) -> None:
    """What the option types cannot say about a ProposerConfig (an :class:`InputError` naming the
    option, before any GPU probe or model call)."""
    from .proposers.models import parse_model_spec
    from .proposers.pricing import PriceTable

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
    if cfg.models:
        for name in ANTHROPIC_ONLY[:2]:
            if getattr(cfg, name) is not None and "anthropic" not in providers:
                raise InputError(f"--{name.replace('_', '-')} (proposer.{name}) applies to anthropic:MODEL "
                                 f"models only; the run asks {', '.join(cfg.models)}")
        if cfg.max_tokens_field is not None and "openai" not in providers:
            raise InputError("--max-tokens-field (proposer.max_tokens_field) applies to openai:MODEL models only")
    if cfg.thinking is not None and cfg.thinking_budget is not None:
        raise InputError("give --thinking-budget (manual extended thinking) or --thinking, not both")
    if cfg.reasoning_effort in ("none", "minimal") and "anthropic" in providers:
        raise InputError(f"--reasoning-effort {cfg.reasoning_effort}: Anthropic models take low, medium, high, "
                         "xhigh or max (output_config.effort)")
    if cfg.max_tokens_cap < cfg.max_tokens:
        raise InputError(f"--max-output-tokens-cap ({cfg.max_tokens_cap}) is below --max-output-tokens "
                         f"({cfg.max_tokens})")
    PriceTable(cfg.prices or None, where="$.proposer.prices")   # malformed overrides fail here, naming the entry


def check_budget_prices(cfg: ProposerConfig, budget_usd: float | None) -> None:
    """A budget can only stop a run whose every model is priced: refuse to start otherwise."""
    if budget_usd is None or not cfg.models:
        return
    from .proposers.models import parse_model_spec
    from .proposers.pricing import PriceTable

    table = PriceTable(cfg.prices or None)
    missing = [m for m in cfg.models if table.lookup(*parse_model_spec(m)) is None]
    if missing:
        example = missing[0].strip().lower()
        raise InputError(
            f"--budget-usd {budget_usd:g}: no price is known for {', '.join(missing)}, so its cost "
            "cannot be counted and the budget could never stop the run",
            hint=f'give its prices (USD per million tokens) in the --config file: {{"proposer": {{"prices": '
                 f'{{"{example}": {{"input": 0.5, "output": 1.5}}}}}}}} (see kernel_forge/data/pricing.json), '
                 "or drop --budget-usd")


def model_options(cfg: ProposerConfig) -> dict:
    """The keyword arguments a model proposer takes from ``cfg``."""
    return dict(max_tokens=cfg.max_tokens, max_tokens_cap=cfg.max_tokens_cap, temperature=cfg.temperature,
                reasoning_effort=cfg.reasoning_effort, thinking_budget=cfg.thinking_budget, thinking=cfg.thinking,
                timeout=cfg.request_timeout_s, timeout_retries=cfg.timeout_retries, max_attempts=cfg.max_attempts,
                stream=cfg.stream, max_tokens_field=cfg.max_tokens_field, prompt_cache=cfg.prompt_cache)


class EnsembleProposer:
    """Several model proposers: one per iteration in turn, or all of them each iteration."""

    def __init__(self, members, mode: str = "round-robin"):
        if mode not in ("round-robin", "parallel"):
            raise InputError(f"--ensemble must be round-robin or parallel, not {mode!r}")
        self.members, self.mode = members, mode
        self.name = "+".join(m.name for m in members)
        self.needs_prompt = True

    def propose(self, request: ProposalRequest) -> ProposalResult:
        if self.mode == "round-robin" or len(self.members) == 1:
            member = self.members[(request.iteration - 1) % len(self.members)]
            return member.propose(request)
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=len(self.members)) as pool:
            results = list(pool.map(lambda m: m.propose(request), self.members))
        merged = ProposalResult(unreachable=all(r.unreachable for r in results))
        for r in results:
            for p in r.proposals:       # Proposal.calls index the merged list
                p.calls = [i + len(merged.calls) for i in p.calls]
            merged.proposals += r.proposals
            merged.calls += r.calls
            merged.errors += r.errors
        return merged


def make_proposer(cfg: ProposerConfig, task: Task, history: list[dict] | None = None):
    history = history or []
    if cfg.replay:
        from .proposers.replay import ReplayProposer
        # every replayed proposal has a unique label (file name or FILE:LINE)
        labels = {a.get("label") for a in history if a.get("proposer") == "replay"}
        return ReplayProposer(cfg.replay, skip=len(labels))
    check_proposer(cfg)
    if cfg.models:
        from .proposers.models import make_model_proposer
        members = [make_model_proposer(m, base_url=cfg.base_url, prices=cfg.prices or None, **model_options(cfg))
                   for m in cfg.models]
        return EnsembleProposer(members, cfg.ensemble)
    from .proposers.tune import TuneProposer
    templates = list(getattr(task, "templates", ()) or ())
    if not templates:
        from .patterns import tuner_templates
        templates = tuner_templates(task)      # the expert patterns that carry this task's exact signature
    done = len({a.get("label") for a in history if a.get("proposer") == "tune"})
    return TuneProposer(templates, skip=done)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_config_file(path: str | Path) -> dict:
    from .evidence import read_json_file

    p = Path(path)
    data = read_json_file(p, "config")
    if not isinstance(data, dict):
        raise InputError(f"{p}: a config is a JSON object")
    known = {"manifest", "runs_dir"} | {f"loop.{f.name}" for f in fields(LoopConfig)} | \
            {f"gate.{f.name}" for f in fields(GateOptions)} | {f"proposer.{f.name}" for f in fields(ProposerConfig)}
    for section in ("loop", "gate", "proposer"):
        sub = data.get(section, {})
        if not isinstance(sub, dict):
            raise InputError(f"{p}: $.{section} must be an object")
        for k in sub:
            if f"{section}.{k}" not in known:
                raise InputError(f"{p}: $.{section}.{k}: unknown setting",
                                 hint="known: " + ", ".join(sorted(x for x in known if x.startswith(section + "."))))
    for k in data:
        if k not in ("loop", "gate", "proposer", "manifest", "runs_dir", "$comment"):
            raise InputError(f"{p}: $.{k}: unknown section (loop, gate, proposer, manifest, runs_dir)")
    from .cli_options import from_file   # types and bounds of every value, naming its JSON path
    for section, cls in (("loop", LoopConfig), ("gate", GateOptions), ("proposer", ProposerConfig)):
        data[section] = from_file(section, cls, data.get(section, {}), str(p))
    for k in ("manifest", "runs_dir"):
        if k in data and not isinstance(data[k], str):
            raise InputError(f"{p}: $.{k}: expected a string (a path), got {data[k]!r}")
    return data


def _build(cls, values: dict, where: str):
    try:
        return cls(**values)
    except TypeError as exc:
        raise InputError(f"{where}: {exc}") from None


def make_gate(task: Task, gate_opts: GateOptions):
    """The gate a run uses: one GPU, or a :class:`~kernel_forge.gate_pool.GatePool` over
    ``gate_opts.devices`` (one worker per GPU, an iteration's candidates gated in parallel)."""
    if gate_opts.devices.strip() in ("", str(gate_opts.device)):
        gate = Gate(task, gate_opts)
    else:
        from .gate_pool import GatePool, parse_devices
        from .gpu.driver import device_count

        gate = GatePool.for_devices(task, gate_opts, parse_devices(gate_opts.devices, device_count()))
    gate.ensure_gpu()
    return gate


def _retrieval(task: Task, loop: LoopConfig, gate, progress):
    """What the archive gives a new run (with it off: only the expert pattern of the task's kind)."""
    from .patterns import classify
    from .retrieval import Retrieved, retrieve_for_run, with_pattern

    if (loop.archive or "").lower() == "off":
        return Retrieved(examples=with_pattern([], task, loop.archive_examples), kind=dict(vars(classify(task))))
    device = gate.device_info() or {}
    return retrieve_for_run(task, path=loop.archive, k=loop.archive_examples, max_chars=loop.archive_chars,
                            gpu=device.get("name"), progress=progress)


def start_run(manifest: str | Path, loop: LoopConfig, gate_opts: GateOptions, prop: ProposerConfig,
              runs_dir: str | Path = "runs", progress=lambda m: None, *, gate=None, proposer=None) -> Optimizer:
    """A new run folder and its optimizer.  ``gate`` and ``proposer`` replace the ones built from
    ``gate_opts`` and ``prop`` (anything with their interface: tests pass fakes, embedders their own)."""
    task = load_task(manifest)
    check_budget_prices(prop, loop.budget_usd)
    if proposer is None:
        proposer = make_proposer(prop, task)
    if gate is None:
        gate = make_gate(task, gate_opts)
    run = RunDir.create(runs_dir)
    run.write_json("run.json", {
        "task": task.name, "manifest": str(Path(manifest).resolve()), "kernel_forge": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": sys.argv,
        "hashes": {"task": task.hash(), "manifest": _sha(task.path), "reference": _sha(task.reference.path),
                   "initial": _sha(task.initial), "harness": harness_hash()},
        "loop": loop.to_json(), "gate": asdict(gate_opts), "proposer": asdict(prop)})
    run.write_json("manifest.json", task.raw)
    run.write_json("env.json", environment_fingerprint(gate.device_info(), gate.calibrate()))
    retrieved = _retrieval(task, loop, gate, progress)
    run.write_json("retrieval.json", retrieved.to_json())
    return Optimizer(task, gate, proposer, run, loop, progress=progress, retrieved=retrieved)


def resume_run(path: str | Path, progress=lambda m: None, overrides: dict | None = None, *, gate=None) -> Optimizer:
    run = RunDir.open(path)
    meta = run.read_json("run.json")
    task = load_task(meta["manifest"])
    if task.hash() != meta["hashes"]["task"]:
        raise InputError(f"{meta['manifest']} or its reference changed since {run.path.name} started; "
                         "a run cannot resume against a different task", hint="start a new run instead")
    loop = _build(LoopConfig, {**meta["loop"], **(overrides or {})}, "run.json $.loop")
    gate_opts = _build(GateOptions, meta["gate"], "run.json $.gate")
    prop = _build(ProposerConfig, meta["proposer"], "run.json $.proposer")
    check_budget_prices(prop, loop.budget_usd)
    hist = run.read_json("history.json", {}) or {}
    proposer = make_proposer(prop, task, hist.get("attempts", []))
    if gate is None:
        gate = make_gate(task, gate_opts)
    from .retrieval import Retrieved
    retrieved = Retrieved.from_json(run.read_json("retrieval.json"))   # the same examples as at its start
    return Optimizer(task, gate, proposer, run, loop, progress=progress, retrieved=retrieved)


def first_prompt_parts(manifest: str | Path, hints: str = "", device_file: str | Path | None = None
                       ) -> tuple[str, str, str]:
    """(system, static prefix, dynamic part) of a run's first model call, built without a GPU:
    the initial kernel stands as the unmeasured best.  With ``device_file`` (a device
    description, e.g. kernel_forge/data/devices/h200.json) the device section is complete and
    the initial kernel is compiled with NVRTC for its arch, so the prompt shows its registers,
    shared memory and occupancy; without it the device section says it is unknown."""
    from .prompts import PromptAttempt, build_prompt_parts, system_prompt

    task = load_task(manifest)
    device = calibration = None
    log = ""
    if device_file is not None:
        from .device_description import load
        device, calibration = load(device_file)
        try:
            from .gpu.nvrtc import compile_source
            log = compile_source(task.initial.read_text(encoding="utf-8"), arch=device["arch"],
                                 file_label=task.initial.name).log
        except Exception:  # noqa: BLE001 - no NVRTC here, or it does not compile: the prompt says less
            log = ""
    from .retrieval import pattern_example

    best = PromptAttempt(id="initial", source=task.initial.read_text(encoding="utf-8"), passed=True,
                         reason="passed", message="", score_us=None, compile_log=log)
    pattern = pattern_example(task)
    static, dynamic = build_prompt_parts(task, reference_source=task.reference.path.read_text(encoding="utf-8"),
                                         device=device, calibration=calibration, best=best, history=[],
                                         failures=[], hints=hints, retrieved=(pattern,) if pattern else ())
    return system_prompt(), static, dynamic


def first_prompt(manifest: str | Path, hints: str = "", device_file: str | Path | None = None) -> tuple[str, str]:
    """The system and user prompts of a run's first model call (see :func:`first_prompt_parts`)."""
    system, static, dynamic = first_prompt_parts(manifest, hints, device_file)
    return system, static + "\n\n" + dynamic


def harness_hash() -> str:
    """Hash of kernel_forge's own source: which harness produced the evidence."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()
