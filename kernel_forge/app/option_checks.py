"""Checks of what a user typed or wrote that the settings declaration cannot say alone, before
anything runs: the model specs and endpoint, the prices of a config file, the environment
(:mod:`kernel_forge.config.environment`), the GPUs asked for and the output paths.  (Types and
bounds of every setting are the one validator's: :mod:`kernel_forge.config.build`.)  Every check
raises an :class:`~kernel_forge.common.errors.InputError` that names the option, or the file and
JSON path."""
from __future__ import annotations

import os
from pathlib import Path

from kernel_forge.common.errors import InputError
from kernel_forge.common.json_path import json_path
from kernel_forge.config.build import Where
from kernel_forge.config.environment import check_base_url, check_environment
from kernel_forge.config.file import load_config_file
from kernel_forge.config.gate_settings import GateOptions, devices_syntax
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.config.sections import check_settings as config_check


def check_devices(spec: str, *, where: str = "--devices") -> None:
    """``--devices`` before the GPU probe: ordinals like ``0,1`` (each once) or ``all``."""
    if devices_syntax(spec) is None:
        raise InputError(f"{where} {spec!r}: give GPU ordinals like 0,1 (each once) or 'all'")


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


def check_settings(obj, where: Where | None = None) -> None:
    """Every field of a settings dataclass (LoopConfig, GateOptions, ProposerConfig) within its
    declared bounds (named as ``where`` says; default: by its command-line option), and what the
    declaration cannot say: the provider environment for a ProposerConfig, the timing environment
    for a GateOptions."""
    config_check(obj, where)
    if isinstance(obj, ProposerConfig):
        check_proposer(obj.models, obj.base_url)
        check_provider_environment(obj.models, obj.base_url)
    if isinstance(obj, GateOptions):
        check_environment(timing=True)


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


def check_prices(prices, *, file: str) -> None:
    """A config file's ``proposer.prices``: a malformed price names the file and the entry."""
    if prices is None:
        return
    from kernel_forge.proposers.pricing import PriceTable

    if not isinstance(prices, dict):
        raise InputError(f"{file}: {json_path('proposer', 'prices')}: expected an object {{\"provider:model\": {{\"input\": X, "
                         f"\"output\": Y}}}}, got {prices!r}")
    PriceTable(prices, where=f"{file}: {json_path('proposer', 'prices')}")     # a malformed price names the file and entry


def check_optimize_params(params: dict) -> None:
    """What the optimize command's option values (``click.get_current_context().params``, each
    already checked by the one validator) and its ``--config`` file cannot say alone, before
    anything touches the GPU: the model specs and endpoint, the prices, the environment."""
    params = {name.split("__", 1)[-1]: value for name, value in params.items()}   # section__field -> field
    models = list(params.get("models") or ())
    config_file = params.get("config_file")
    cfg = {}
    if config_file:
        cfg = load_config_file(config_file)
        check_prices((cfg.get("proposer") or {}).get("prices"), file=str(config_file))
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


# --------------------------------------------------------------------------------- outputs

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
