"""Model proposers for the entries of kforge's capability table (kernel_forge/data/models.json),
pointed at the loopback server: a table key's provider and spec (``local:SERVER`` entries are
served as ``openai:MODEL``), and the proposer the tests of the table's bodies talk to it with."""
from __future__ import annotations

from kernel_forge.proposers.models import make_model_proposer

from tests.support.loopback import Loopback

#: the API keys the table tests send (none of them may reach the evidence)
KEYS = {"anthropic": "sk-ant-api03-TABLE-secret-0123456789abcdef", "openai": "sk-proj-TABLE-secret-0123456789abcdef"}


def spec_of(key: str) -> tuple[str, str, str | None]:
    """(provider, model spec, server) of a table key (local:SERVER entries are served as openai:MODEL)."""
    provider, _, model = key.partition(":")
    if provider == "local":
        return "openai", f"openai:served-by-{model}", model
    return provider, key, None


def proposer_for(key: str, server: Loopback, **kw):
    provider, spec, local = spec_of(key)
    url = server.anthropic_base_url if provider == "anthropic" else server.openai_base_url
    extra = {"server": local, "prices": {spec: [0.1, 0.2]}} if local else {}
    return make_model_proposer(spec, base_url=url, api_key=KEYS[provider], request_timeout_s=5, **extra, **kw)
