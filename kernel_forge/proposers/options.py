"""How a model is asked: the provider options, declared once (:class:`ProviderOptions`).

Each field carries its type (the annotation; a ``Literal`` lists its choices), its default, its
bounds and help and command-line flag (:func:`~kernel_forge.common.setting.setting`), and, for an
option only one provider takes, that provider (:func:`only_for`).  Its name is its key in the
``proposer`` section of a config file and of ``run.json``.  From it are made: the config section
(``ProposerConfig`` adds the run's own fields to it), the ``kforge optimize`` options, the MCP
tools' arguments, and the providers' constructors, which take one :class:`ProviderOptions`.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Literal

from kernel_forge.common.setting import DAY_S, MAX_TOKENS, setting

#: the metadata key of an option only one provider takes (its value: the provider's name)
ONLY = "kforge.provider"
EFFORTS = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


def option(default: Any = dataclasses.MISSING, *, only: str | None = None, **spec: Any):
    """A provider option: :func:`~kernel_forge.common.setting.setting`, plus the one provider that
    takes it (``only``; None: every provider)."""
    return setting(default, metadata={ONLY: only} if only else None, **spec)


@dataclass
class ProviderOptions:
    """How a model is asked: its endpoint, output limit, thinking, effort, timeouts, retries,
    streaming, prompt cache and answer format.  Every field is a ``kforge optimize`` option and a
    ``proposer`` config key; a provider's own ones are dropped for the other provider."""

    base_url: str | None = option(None, flag="--base-url",
                                  help="the models' endpoint (http:// or https://): vLLM, Ollama, llama.cpp, a gateway")
    max_tokens: int | None = option(
        None, min=1, max=MAX_TOKENS, flag="--max-output-tokens",
        help="output tokens per model request, thinking included (default: the model's entry: room to think plus a "
             "kernel, 32000 within its maximum)")
    max_tokens_cap: int | None = option(
        None, min=1, max=MAX_TOKENS, flag="--max-output-tokens-cap",
        help="most output tokens the one retry of a cut-off answer may ask for (default: the model's maximum)")
    temperature: float | None = option(
        None, min=0, max=2,
        help="sampling temperature; sent only to models that take one (the capability table), dropped for the run "
             "if the model rejects it")
    reasoning_effort: EFFORTS | None = option(
        None, help="OpenAI reasoning.effort / Anthropic output_config.effort (default: high, where the model takes "
                   "an effort); stepped down to the highest level the model takes")
    thinking_budget: int | None = option(
        None, only="anthropic", min=1024, max=MAX_TOKENS,
        help="Anthropic extended thinking budget_tokens (>= 1024, manual thinking); a model with adaptive thinking "
             "only gets adaptive thinking")
    thinking: Literal["adaptive", "disabled"] | None = option(
        None, only="anthropic",
        help="Anthropic thinking mode (default: on where the model has it: adaptive, else a budget); disabled "
             "is refused by models that always think")
    request_timeout_s: float = option(
        120.0, above=0, max=DAY_S, flag="--request-timeout",
        help="seconds one model request may take; when streamed, the longest silence between chunks")
    timeout_retries: int = option(2, min=0, max=100, help="further attempts after a model request timed out")
    max_attempts: int = option(5, min=1, max=100, help="HTTP attempts per model request on transient failures (429, "
                                                       "5xx, dropped connections)")
    stream: bool = option(True, help="stream model answers, so that a long answer cannot outlast the timeout")
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = option(
        None, only="openai",
        help="OpenAI-compatible servers (Chat Completions): the field for the output limit (default: the "
             "server's entry, max_tokens)")
    prompt_cache: bool = option(True, help="cache the shared prompt prefix (Anthropic cache_control breakpoints, "
                                           "OpenAI prompt_cache_key)")
    cache_ttl: Literal["auto", "short", "long"] = option(
        "auto", help="prompt-cache lifetime of the run's part of the prompt: short (5 min / 30 min), long (1 h / "
                     "12 h), or auto (long once an iteration takes longer than the short one)")
    answer_format: Literal["fenced", "tool"] = option(
        "fenced", help="how a model answers: the kernel in a fenced code block (or search/replace edits) and a small "
                       "JSON part, or a submit_kernel tool call")
    context_tokens: int | None = option(
        None, min=1024, max=MAX_TOKENS, flag="--context-tokens",
        help="the model's context window in tokens (default: its capability entry; give it for a local server, "
             "llama.cpp, Ollama or vLLM, whose served window the table cannot know); every call is checked against "
             "it before it is made")
    server: Literal["auto", "vllm", "llama.cpp", "ollama", "sglang"] = option(
        "auto", only="openai",
        help="the OpenAI-compatible server behind --base-url, for its capability entry (auto: a generic one)")


def names() -> tuple[str, ...]:
    """The provider options' names (config keys), in declaration order."""
    return tuple(f.name for f in dataclasses.fields(ProviderOptions))


def only_for(name: str) -> str | None:
    """The one provider that takes option ``name`` (None: every provider)."""
    return next(f.metadata.get(ONLY) for f in dataclasses.fields(ProviderOptions) if f.name == name)


def choices(name: str) -> tuple:
    """The values option ``name`` may take (its ``Literal``), ``None`` aside."""
    hint = typing.get_type_hints(ProviderOptions)[name]
    found: list = []
    for arg in typing.get_args(hint) or (hint,):
        if typing.get_origin(arg) is Literal:
            found += typing.get_args(arg)
    if typing.get_origin(hint) is Literal:
        found = list(typing.get_args(hint))
    return tuple(found)


def options_of(obj: Any) -> ProviderOptions:
    """The provider options of ``obj`` (a ``ProposerConfig``, or anything with those attributes)."""
    return ProviderOptions(**{n: getattr(obj, n) for n in names()})


def for_provider(options: ProviderOptions, provider: str) -> ProviderOptions:
    """``options`` as ``provider`` takes them: the other providers' own options at their defaults,
    so one set of options serves an ensemble of both."""
    defaults = ProviderOptions()
    drop = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(ProviderOptions)
            if f.metadata.get(ONLY) not in (None, provider)}
    return dataclasses.replace(options, **drop)
