"""Model specs (``"anthropic:MODEL"``, ``"openai:MODEL"``) and the factory that builds the
provider's proposer from one (:func:`make_model_proposer`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernel_forge.common.errors import InputError
from kernel_forge.proposers.pricing import PriceTable

PROVIDERS = ("anthropic", "openai")
ACCEPTED_FORMS = (
    "anthropic:MODEL (e.g. anthropic:claude-opus-5-5; key from ANTHROPIC_API_KEY)",
    "openai:MODEL (e.g. openai:gpt-6.2-sol; key from OPENAI_API_KEY; with a base URL also vLLM, "
    "Ollama or any OpenAI-compatible server, e.g. openai:qwen2.5-coder:32b)",
)


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``"openai:qwen2.5-coder:32b"`` -> ``("openai", "qwen2.5-coder:32b")`` (split at the first
    colon); anything else raises :class:`InputError` listing the accepted forms."""
    accepted = "accepted forms: " + "; ".join(ACCEPTED_FORMS)
    if not isinstance(spec, str) or ":" not in spec:
        raise InputError(f"model spec {spec!r} names no provider", hint=accepted)
    provider, _, model = spec.strip().partition(":")
    provider, model = provider.strip().lower(), model.strip()
    if provider not in PROVIDERS:
        raise InputError(f"model spec {spec!r}: unknown provider {provider!r}", hint=accepted)
    if not model:
        raise InputError(f"model spec {spec!r} names no model", hint=accepted)
    return provider, model


#: keyword arguments only one provider's proposer takes; make_model_proposer drops them for the other
PROVIDER_ONLY = {"anthropic": frozenset({"thinking_budget", "thinking"}),
                 "openai": frozenset({"max_tokens_field", "server"})}


def make_model_proposer(spec: str, *, base_url: str | None = None,
                        prices: PriceTable | Mapping[str, object] | None = None, **kw: Any):
    """Build an :class:`AnthropicProposer` or :class:`OpenAIProposer` from ``"provider:MODEL"``.
    ``kw`` goes to the proposer (api_key, max_tokens, temperature, timeout, max_attempts, stream,
    reasoning_effort, ...); the other provider's own options (``thinking_budget``,
    ``max_tokens_field`` ...) are dropped, so one set of options serves an ensemble."""
    provider, model = parse_model_spec(spec)
    other = PROVIDER_ONLY["openai" if provider == "anthropic" else "anthropic"]
    kw = {k: v for k, v in kw.items() if k not in other}
    if provider == "anthropic":
        from kernel_forge.proposers.anthropic_provider import AnthropicProposer
        return AnthropicProposer(model, base_url=base_url, prices=prices, **kw)
    from kernel_forge.proposers.openai_provider import OpenAIProposer
    return OpenAIProposer(model, base_url=base_url, prices=prices, **kw)
