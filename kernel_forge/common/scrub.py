"""Credentials out of anything kforge writes: API keys under their usual keys, strings that look
like keys or bearer tokens, and any exact secret a caller names."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any


REDACTED = "[REDACTED]"


# Mapping keys whose values are credentials, compared lower-case with '-' read as '_'.
_SECRET_KEYS = frozenset({
    "api_key", "apikey", "x_api_key", "authorization", "proxy_authorization", "auth_token",
    "access_token", "refresh_token", "id_token", "client_secret", "secret_key", "password",
    "anthropic_api_key", "openai_api_key", "anthropic_auth_token", "x_goog_api_key", "api_token",
})


_SECRET_PATTERNS = (
    # Anthropic (sk-ant-...) and OpenAI (sk-..., sk-proj-...) style keys
    (re.compile(r"(?<![A-Za-z0-9])sk-(?:ant-)?[A-Za-z0-9_\-]{16,}"), REDACTED),
    # a bearer token quoted in some error text
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 " + REDACTED),
)


def _is_secret_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    k = key.strip().lower().replace("-", "_")
    return k in _SECRET_KEYS or k.endswith("_api_key")


def _scrub_text(text: str, secrets: tuple[str, ...]) -> str:
    for s in secrets:
        if s and s in text:
            text = text.replace(s, REDACTED)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def scrub(obj: Any, secrets: tuple[str, ...] | list[str] = ()) -> Any:
    """A copy of ``obj`` (nested dicts, lists, tuples, strings, dataclasses) with credentials
    replaced by ``[REDACTED]``: values under keys such as ``api_key``, ``x-api-key`` or
    ``Authorization``; substrings that look like ``sk-...`` / ``sk-ant-...`` keys or
    ``Bearer`` tokens; and any exact string in ``secrets`` (e.g. a local server's key that
    matches no pattern).  ``obj`` itself is not modified."""
    secrets = tuple(s for s in secrets if isinstance(s, str) and len(s) >= 4)
    return _scrub(obj, secrets)


_PLAIN = (int, float, bool, type(None))


def _scrub(obj: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(obj, str):
        return _scrub_text(obj, secrets)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            key = _scrub_text(k, secrets) if isinstance(k, str) else k
            out[key] = REDACTED if (_is_secret_key(k) and v not in (None, "")) else _scrub(v, secrets)
        return out
    if isinstance(obj, list):
        if all(type(v) in _PLAIN for v in obj):     # timing samples and the like: nothing to scrub
            return list(obj)
        return [_scrub(v, secrets) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_scrub(v, secrets) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _scrub(getattr(obj, f.name), secrets) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj
