"""kernel_forge.proposers.models: providers registered by name, model specs, the factory."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.proposers import models
from kernel_forge.proposers.options import ProviderOptions


class Echo:
    """A proposer class that keeps what it was built with."""

    def __init__(self, model, options, **wiring):
        self.model, self.options, self.wiring = model, options, wiring


def test_a_provider_is_one_registry_entry(monkeypatch):
    monkeypatch.setitem(models.PROVIDERS, "echo", models.Provider("echo", lambda: Echo, "echo:MODEL (a test)"))
    p = models.make_model_proposer("echo:m-1", ProviderOptions(max_tokens=10), thinking="adaptive", server="vllm",
                                   api_key="k")
    assert isinstance(p, Echo) and p.model == "m-1" and p.wiring == {"api_key": "k"}
    # option values by name are laid over the options; both providers' own options are dropped for it
    assert (p.options.max_tokens, p.options.thinking, p.options.server) == (10, None, "auto")


def test_an_unknown_provider_lists_every_registered_form():
    with pytest.raises(InputError) as info:
        models.parse_model_spec("mistral:large")
    assert "unknown provider 'mistral'" in str(info.value)
    assert all(p.form in info.value.hint for p in models.PROVIDERS.values())
    assert models.SPEC_FORMS == "anthropic:MODEL or openai:MODEL"


@pytest.mark.parametrize("spec", ["gpt-5", "google:gemini-2.5-pro", "openai:", "anthropic:  ", "", "claude"])
def test_make_model_proposer_rejects_bad_specs(spec):
    with pytest.raises(InputError) as info:
        models.make_model_proposer(spec)
    text_ = str(info.value)
    assert "anthropic:MODEL" in text_ and "openai:MODEL" in text_
