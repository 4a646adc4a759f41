"""Checks of what a user typed or wrote, before anything runs: option values, a config file's
types and ranges, the provider environment, the GPUs asked for and the output paths.  Every
check raises an :class:`~kernel_forge.common.errors.InputError` that names the option, or the
file and JSON path."""
from __future__ import annotations

import math
import os
import re
import types
import typing
from dataclasses import fields
from pathlib import Path
from urllib.parse import urlparse

from kernel_forge.common.errors import InputError
from kernel_forge.gate.preflight import check_kernel, check_sizes, compile_kernel
from kernel_forge.model.candidate import Candidate
from kernel_forge.model.limits import launch_limits
from kernel_forge.model.task import Task

def _positive(v) -> bool:
    return v > 0


def _at_least(n):
    return lambda v: v >= n


#: field -> (test, what it must be); None values mean "not set" and pass
RULES: dict[str, tuple] = {
    # LoopConfig
    "max_iterations": (_at_least(1), "at least 1"),
    "candidates": (_at_least(1), "at least 1"),
    "search": (lambda v: v in ("greedy", "population", "anneal", "brute"), "greedy, population, anneal or brute"),
    "roof_stop": (lambda v: 0 <= v <= 2, "in [0, 2] (a share of the roof; 0: never)"),
    "tune_time_limit_s": (_at_least(0), "0 or more seconds (0: none)"),
    "budget_usd": (_positive, "above 0"),
    "max_tokens": (_at_least(1), "at least 1"),
    "time_limit_s": (_positive, "above 0 seconds"),
    "patience": (_at_least(1), "at least 1"),
    "target_speedup": (_positive, "above 0"),
    "tune_budget": (_at_least(1), "at least 1"),
    "history_in_prompt": (_at_least(0), "0 or more"),
    "failures_in_prompt": (_at_least(0), "0 or more"),
    "crossover_every": (_at_least(0), "0 or more"),
    "retime_rounds": (_at_least(1), "at least 1"),
    "min_improvement": (lambda v: 0 <= v < 1, "in [0, 1)"),
    # GateOptions
    "warmup": (_at_least(0), "0 or more"),
    "reps": (_at_least(1), "at least 1"),
    "extra_draws": (_at_least(0), "0 or more"),
    "launch_timeout_s": (_positive, "above 0 seconds"),
    "timing_timeout_s": (_positive, "above 0 seconds"),
    "device": (_at_least(0), "0 or more"),
    "plausible_margin": (_at_least(1), "at least 1"),
    "max_noise": (lambda v: 0 <= v <= 1, "in [0, 1] (a fraction of the median; 0: always --reps)"),
    "arch": (lambda v: re.fullmatch(r"sm_\d+[af]?", v) is not None, "like sm_90"),
    "compare": (lambda v: v in ("gpu", "cpu"), "gpu or cpu"),
    "devices": (lambda v: devices_syntax(v) is not None, "GPU ordinals like 0,1 (each once) or all"),
    # ProposerConfig
    "temperature": (lambda v: 0 <= v <= 2, "in [0, 2]"),
    "max_tokens_cap": (_at_least(1), "at least 1"),
    "ensemble": (lambda v: v in ("round-robin", "parallel"), "round-robin or parallel"),
}

#: command-line spelling of the fields whose option name differs from the field's
FLAGS = {"launch_timeout_s": "--timeout", "time_limit_s": "--time-limit", "models": "--model"}


def devices_syntax(spec: str) -> list[int] | str | None:
    """A ``--devices`` value read without a GPU: the ordinals, ``"all"``, ``[]`` for none given,
    or None when it is not ordinals like ``0,1`` (each once) or ``all``."""
    if not isinstance(spec, str):
        return None
    text = spec.strip().lower()
    if text in ("", "all"):
        return text or []
    parts = [x.strip() for x in text.split(",")]
    if not all(re.fullmatch(r"\d+", x) for x in parts):
        return None
    ids = [int(x) for x in parts]
    return ids if len(set(ids)) == len(ids) else None


def check_devices(spec: str, *, where: str = "--devices") -> None:
    """``--devices`` before the GPU probe: ordinals like ``0,1`` (each once) or ``all``."""
    if devices_syntax(spec) is None:
        raise InputError(f"{where} {spec!r}: give GPU ordinals like 0,1 (each once) or 'all'")


def flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def _type_ok(value, hint) -> bool:
    try:
        return _type_matches(value, hint)
    except TypeError:        # an annotation this checker does not know (Literal, a Protocol, ...)
        return True


def _type_matches(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is typing.Any:
        return True
    if origin is not None:
        if not isinstance(value, origin):
            return False
        args = typing.get_args(hint)
        if origin in (list, tuple) and args and args[-1] is not Ellipsis:
            return all(_type_ok(v, args[0]) for v in value)
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _type_name(hint) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    if hint is type(None):
        return "null"
    names = {int: "a whole number", float: "a number", bool: "true or false", str: "text", list: "a list",
             dict: "an object"}
    return names.get(origin or hint, getattr(hint, "__name__", str(hint)))


def check_value(name: str, value, hint=None, *, where: str) -> None:
    """One setting: its type (when ``hint`` is given) and its range.  ``where`` names it in
    the message (an option like ``--reps 0`` or a file and JSON path).  A number must be finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{where}: must be a finite number, got {value!r}")
    if hint is not None and not _type_ok(value, hint):
        raise InputError(f"{where}: expected {_type_name(hint)}, got {value!r}")
    if value is None or name not in RULES:
        return
    if isinstance(value, bool) and name != "ensemble":
        raise InputError(f"{where}: expected a number, got {value!r}")
    test, must = RULES[name]
    try:
        ok = test(value)
    except TypeError:
        ok = False
    if not ok:
        raise InputError(f"{where}: must be {must}")


#: what the timing environment variables may be (the GPU worker reads them; a typo must not pass silently)
CLOCK_KINDS = ("cupti", "events")


def check_environment(*, timing: bool = True) -> None:
    """The environment variables kforge reads, before anything uses them: ``KFORGE_CLOCK``
    (``cupti``, the default, or ``events``) and ``KFORGE_CLOCK_OFFSET_US`` (a finite number of
    microseconds >= 0) when ``timing``.  Refused with exit 2 naming the variable."""
    if not timing:
        return
    clock = os.environ.get("KFORGE_CLOCK", "")
    if clock.strip() and clock.strip().lower() not in CLOCK_KINDS:
        raise InputError(f"KFORGE_CLOCK={clock!r}: must be {' or '.join(CLOCK_KINDS)} (or unset: cupti)",
                         hint="unset it, or KFORGE_CLOCK=events to time with CUDA events alone")
    offset = os.environ.get("KFORGE_CLOCK_OFFSET_US", "")
    if offset.strip():
        try:
            value = float(offset)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            raise InputError(f"KFORGE_CLOCK_OFFSET_US={offset!r}: must be a finite number of microseconds >= 0 "
                             "(the GPU's launch offset, e.g. 0.86)", hint="unset it to use the measured offset")


def check_provider_environment(models, base_url=None) -> None:
    """``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, which the SDKs read when no --base-url is
    given: an http(s) URL, for the providers the run asks."""
    if base_url is not None:
        return
    from kernel_forge.proposers.models import parse_model_spec

    for provider in sorted({parse_model_spec(m)[0] for m in models or ()}):
        var = f"{provider.upper()}_BASE_URL"
        value = os.environ.get(var)
        if value:
            check_base_url(value, where=var)


def check_settings(obj, *, where: str = "") -> None:
    """Every field of a settings dataclass (LoopConfig, GateOptions, ProposerConfig)."""
    hints = typing.get_type_hints(type(obj))
    for f in fields(obj):
        value = getattr(obj, f.name)
        label = f"{where}{f.name}" if where else f"{flag(f.name)} {value!r}"
        check_value(f.name, value, hints.get(f.name), where=label)
    if type(obj).__name__ == "ProposerConfig":
        check_proposer(getattr(obj, "models", []), getattr(obj, "base_url", None), where=where)
        check_provider_environment(getattr(obj, "models", []), getattr(obj, "base_url", None))
    if type(obj).__name__ == "GateOptions":
        check_environment(timing=True)


def check_base_url(url: str, *, where: str = "--base-url") -> None:
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InputError(f"{where} {url!r} is not an http:// or https:// URL",
                         hint="e.g. --base-url http://localhost:8000/v1 for a local OpenAI-compatible server")


def check_proposer(models, base_url, *, where: str = "") -> None:
    from kernel_forge.proposers.models import parse_model_spec

    for spec in models or ():
        try:
            parse_model_spec(spec)
        except InputError as exc:
            raise InputError(f"{where}{'models' if where else '--model'}: {exc.message}", hint=exc.hint) from None
    if base_url is not None:
        check_base_url(base_url, where=f"{where}base_url" if where else "--base-url")
        if not models:
            raise InputError(f"{where + 'base_url' if where else '--base-url (proposer.base_url)'} needs --model: "
                             "the model the endpoint serves",
                             hint="e.g. --model openai:qwen2.5-coder:32b --base-url http://localhost:8000/v1")


def _settings_classes() -> dict[str, type]:
    from kernel_forge.gate.gate import GateOptions
    from kernel_forge.search.loop import LoopConfig
    from kernel_forge.app.run_setup import ProposerConfig

    return {"loop": LoopConfig, "gate": GateOptions, "proposer": ProposerConfig}


def check_config(data: dict, *, file: str) -> None:
    """The values of an ``optimize --config`` file: each of the right type and range."""
    for section, cls in _settings_classes().items():
        sub = data.get(section) or {}
        if not isinstance(sub, dict):
            raise InputError(f"{file}: $.{section} must be an object")
        hints = typing.get_type_hints(cls)
        for key, value in sub.items():
            if key in hints:
                check_value(key, value, hints[key], where=f"{file}: $.{section}.{key}")
        if section == "proposer":
            check_proposer(sub.get("models", []), sub.get("base_url"), where=f"{file}: $.proposer.")
    for key in ("manifest", "runs_dir"):
        if key in data and not isinstance(data[key], str):
            raise InputError(f"{file}: $.{key}: expected text, got {data[key]!r}")
    prices = (data.get("proposer") or {}).get("prices")
    if prices is not None:
        from kernel_forge.proposers.pricing import PriceTable
        if not isinstance(prices, dict):
            raise InputError(f"{file}: $.proposer.prices: expected an object {{\"provider:model\": {{\"input\": X, "
                             f"\"output\": Y}}}}, got {prices!r}")
        PriceTable(prices, where=f"{file}: $.proposer.prices")     # a malformed price names the file and entry


#: the optimize command's option names -> the settings field they fill
_ALIASES = {"timeout": "launch_timeout_s", "time_limit": "time_limit_s"}


def check_optimize_params(params: dict) -> None:
    """The optimize command's option values (``click.get_current_context().params``) and its
    ``--config`` file, before anything touches the GPU.  Unknown names are ignored, so the
    check survives new options."""
    params = {name.split("__", 1)[-1]: value for name, value in params.items()}   # section__field -> field
    for name, value in params.items():
        if value is None or value == () or name in ("models", "base_url"):
            continue
        field_name = _ALIASES.get(name, name)
        if field_name in RULES:
            flag = FLAGS.get(field_name, f"--{name.replace('_', '-')}")
            check_value(field_name, value, None, where=f"{flag} {value!r}")
    models = list(params.get("models") or ())
    config_file = params.get("config_file")
    cfg = {}
    if config_file:
        from kernel_forge.app.run_setup import load_config_file
        cfg = load_config_file(config_file)
        check_config(cfg, file=str(config_file))
    base_url = params.get("base_url")
    if base_url is not None:
        check_base_url(base_url)
        if not models and not (cfg.get("proposer") or {}).get("models"):
            raise InputError("--base-url (proposer.base_url) needs --model: the model the endpoint serves",
                             hint="e.g. --model openai:qwen2.5-coder:32b --base-url http://localhost:8000/v1")
    check_proposer(models, None)
    check_provider_environment(models + list((cfg.get("proposer") or {}).get("models") or []),
                               base_url or (cfg.get("proposer") or {}).get("base_url"))
    check_environment(timing=True)


# -------------------------------------------------------------------------------- kernels

OUTPUT_KINDS = {"cubin": ((b"\x7fELF",), "a CUBIN"), "junit": ((b"<?xml", b"<testsuites"), "a JUnit XML file"),
                "json": ((b"{", b"["), "a JSON file")}


def _same_file(a: Path, b: str | Path) -> bool:
    try:
        return a.exists() and Path(b).exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output_path(path: str | Path, *, option: str, kind: str | None = None, inputs=()) -> Path:
    """An output file's folder must exist (nothing is created behind the user's back); an
    existing file there is replaced only when it is an earlier output of the same ``kind`` (a
    CUBIN, a JUnit file, a JSON file) and not one of the command's ``inputs``."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{option} {p}: the folder {parent} does not exist")
    if p.is_dir():
        raise InputError(f"{option} {p}: is a folder, not a file")
    for other in inputs:
        if other and _same_file(p, other):
            raise InputError(f"{option} {p}: is also an input of this command ({other}); nothing was written",
                             hint="write the output to another file")
    if kind is not None and p.exists():
        starts, what = OUTPUT_KINDS[kind]
        try:
            with open(p, "rb") as f:
                head = f.read(64).lstrip()
        except OSError as exc:
            raise InputError(f"{option} {p}: exists and cannot be read ({exc.strerror}); nothing was written") from None
        if head and not head.startswith(starts):
            raise InputError(f"{option} {p}: exists and is not {what}, so not an earlier output; it was left as it is",
                             hint="remove it, or write the output to another file")
    return p


def check_eval(task: Task, cand: Candidate, options, *, file: str | None = None) -> None:
    """Everything ``kforge eval`` can check before the GPU probe."""
    check_settings(options)
    check_kernel(task, cand, file=file, limits=launch_limits(getattr(options, "arch", None)))
    check_sizes(task, gpu_bytes=None)
    if getattr(options, "arch", None):
        compile_kernel(cand, options.arch, file=file)
