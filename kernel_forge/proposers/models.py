"""The model providers, registered by name, and model specs (``"anthropic:MODEL"``,
``"openai:MODEL"``): :func:`make_model_proposer` builds the named provider's proposer from a spec
and one :class:`~kernel_forge.proposers.options.ProviderOptions`.  Adding a provider is one entry
in :data:`PROVIDERS` (its proposer class is imported only when a proposer is built)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel_forge.common.errors import InputError
from kernel_forge.proposers.options import ProviderOptions, for_provider, names


@dataclass(frozen=True)
class Provider:
    """One model provider: its name (the spec's prefix), its proposer class (imported on first
    use) and the accepted form of its specs, for messages."""

    name: str
    load: Callable[[], type]
    form: str


def _anthropic() -> type:
    from kernel_forge.proposers.anthropic_provider import AnthropicProposer
    return AnthropicProposer


def _openai() -> type:
    from kernel_forge.proposers.openai_provider import OpenAIProposer
    return OpenAIProposer


#: every model provider, by name
PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    Provider("anthropic", _anthropic, "anthropic:MODEL (e.g. anthropic:claude-opus-5-5; key from ANTHROPIC_API_KEY)"),
    Provider("openai", _openai, "openai:MODEL (e.g. openai:gpt-6.2-sol; key from OPENAI_API_KEY; with a base URL "
                                "also vLLM, Ollama or any OpenAI-compatible server, e.g. openai:qwen2.5-coder:32b)"),
)}
#: a model spec as every entry point accepts it (the provider checks the rest)
MODEL_SPEC = r"^(" + "|".join(PROVIDERS) + r"):.+$"
#: the forms of a spec, in words
SPEC_FORMS = " or ".join(f"{p}:MODEL" for p in PROVIDERS)


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``"openai:qwen2.5-coder:32b"`` -> ``("openai", "qwen2.5-coder:32b")`` (split at the first
    colon); anything else raises :class:`InputError` listing the accepted forms."""
    accepted = "accepted forms: " + "; ".join(p.form for p in PROVIDERS.values())
    if not isinstance(spec, str) or ":" not in spec:
        raise InputError(f"model spec {spec!r} names no provider", hint=accepted)
    provider, _, model = spec.strip().partition(":")
    provider, model = provider.strip().lower(), model.strip()
    if provider not in PROVIDERS:
        raise InputError(f"model spec {spec!r}: unknown provider {provider!r}", hint=accepted)
    if not model:
        raise InputError(f"model spec {spec!r} names no model", hint=accepted)
    return provider, model


def make_model_proposer(spec: str, options: ProviderOptions | None = None, **kw: Any):
    """The proposer of ``"provider:MODEL"``, asking as ``options`` says; the other providers' own
    options are dropped, so one set serves an ensemble.  ``kw``: option values by name (laid over
    ``options``), and what the proposer is wired to (``api_key``, ``prices``, ``budget``, and the
    tests' ``sleep``, ``retry``, ``parallel``, ``capabilities``, ``clock``)."""
    provider, model = parse_model_spec(spec)
    given = {k: kw.pop(k) for k in list(kw) if k in names()}
    options = dataclasses.replace(options or ProviderOptions(), **given)
    return PROVIDERS[provider].load()(model, for_provider(options, provider), **kw)
