"""Model-backed proposers: ``"anthropic:MODEL"`` / ``"openai:MODEL"`` specs, the machinery the two
providers share, and :func:`scrub`, which removes credentials before anything is written.

Each proposal is its own conversation: one request forcing the ``submit_kernel`` tool, and, if the
answer is malformed (no tool call, arguments that are not JSON or fail the schema), exactly one
repair request quoting the problem.  What still fails becomes a string in
:attr:`ProposalResult.errors`, never an exception.  Every request (retries included) becomes one
:class:`ModelCall` with the body sent, the body received, tokens, cost, seconds and attempts.
"""
from __future__ import annotations

import copy
import dataclasses
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import EnvironmentProblem, InputError
from .base import ModelCall, Proposal, ProposalRequest, ProposalResult
from .pricing import PriceTable, price_table
from .retry import Failure, RetryPolicy, call_with_retry, classify_exception
from .schema import ProposalSchemaError, to_proposal

PROVIDERS = ("anthropic", "openai")
ACCEPTED_FORMS = (
    "anthropic:MODEL (e.g. anthropic:claude-sonnet-4-5; key from ANTHROPIC_API_KEY)",
    "openai:MODEL (e.g. openai:gpt-5; key from OPENAI_API_KEY; with a base URL also vLLM, "
    "Ollama or any OpenAI-compatible server, e.g. openai:qwen2.5-coder:32b)",
)

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
        return [_scrub(v, secrets) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_scrub(v, secrets) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _scrub(getattr(obj, f.name), secrets) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


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


def make_model_proposer(spec: str, *, base_url: str | None = None,
                        prices: PriceTable | Mapping[str, object] | None = None, **kw: Any):
    """Build an :class:`AnthropicProposer` or :class:`OpenAIProposer` from ``"provider:MODEL"``.
    ``kw`` goes to the proposer (api_key, max_tokens, temperature, timeout, max_attempts, ...)."""
    provider, model = parse_model_spec(spec)
    if provider == "anthropic":
        from .anthropic_provider import AnthropicProposer
        return AnthropicProposer(model, base_url=base_url, prices=prices, **kw)
    from .openai_provider import OpenAIProposer
    return OpenAIProposer(model, base_url=base_url, prices=prices, **kw)


# ---------------------------------------------------------------- shared provider machinery

@dataclass
class Reading:
    """What a provider made of one answer."""

    args: dict | None = None          # the tool arguments, when they parsed as a JSON object
    problem: str | None = None        # why the answer is unusable (None: usable)
    rationale_prefix: str = ""        # "[from text]" when taken from a fenced block


def import_sdk(name: str, requirement: str):
    """Import an optional SDK or explain how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EnvironmentProblem(
            f"the {name!r} package is needed for {name}:MODEL proposers but cannot be imported ({exc})",
            hint=f"pip install '{requirement}'   (or: pip install 'cuda-kernel-forge[llm]')",
        ) from None


def dump_response(obj: Any) -> dict | None:
    """The SDK response object as the JSON body it was built from."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj
    # warnings=False: a body that strays from the SDK's types (a local server) is recorded as is
    for attempt in (lambda: obj.model_dump(mode="json", exclude_unset=True, warnings=False),
                    lambda: obj.model_dump(mode="json", exclude_unset=True),
                    lambda: obj.to_dict(),
                    lambda: dict(obj)):
        try:
            return attempt()
        except Exception:  # noqa: BLE001 - try the next way
            continue
    return {"repr": repr(obj)}


class ModelProposer:
    """Base of the two providers: fan-out over ``n``, retries, repair, ModelCall records.

    Subclasses set ``provider`` and ``_sdk_error`` and implement ``_initial_body``, ``_send``,
    ``_usage``, ``_read`` and ``_repair_body``."""

    provider = ""
    needs_prompt = True
    repair_instruction = ("Call submit_kernel again with the complete corrected proposal: the full .cu "
                          "source in `source` and a short `rationale`; `launch` and `tunables` only if "
                          "needed and valid.")

    def __init__(self, model: str, *, api_key: str | None, base_url: str | None, max_tokens: int,
                 temperature: float | None, timeout: float, max_attempts: int,
                 prices: PriceTable | Mapping[str, object] | None,
                 sleep: Callable[[float], None] | None = None, retry: RetryPolicy | None = None,
                 parallel: int = 4):
        if not model or not isinstance(model, str):
            raise InputError(f"{self.provider}: a model name is required")
        if max_tokens < 1:
            raise InputError(f"{self.provider}: max_tokens must be >= 1, got {max_tokens}")
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.base_url = base_url
        self.max_tokens = int(max_tokens)
        self.temperature = temperature
        self.timeout = float(timeout)
        self.prices = price_table(prices)
        self.priced = self.prices.lookup(self.provider, model) is not None
        if retry is None:
            retry = RetryPolicy(max_attempts=max_attempts)
        if sleep is not None:
            retry = dataclasses.replace(retry, sleep=sleep)
        self.retry = retry
        self.parallel = max(1, int(parallel))
        self._secrets: tuple[str, ...] = ()

    # -- hooks ------------------------------------------------------------------------------
    def _initial_body(self, request: ProposalRequest) -> dict: raise NotImplementedError
    def _send(self, body: dict) -> Any: raise NotImplementedError
    def _usage(self, response: Any) -> tuple[int, int]: raise NotImplementedError
    def _read(self, response: Any) -> Reading: raise NotImplementedError
    def _repair_body(self, body: dict, response: Any, problem: str) -> dict: raise NotImplementedError

    #: the SDK's base exception class (set by subclasses once the SDK is imported)
    _sdk_error: type | tuple = ()

    def _classify(self, exc: BaseException) -> Failure | None:
        """Retryable transport/status failures; any other SDK error fails without retry."""
        failure = classify_exception(exc)
        if failure is None and self._sdk_error and isinstance(exc, self._sdk_error):
            failure = Failure(retryable=False, description=f"{type(exc).__name__}: {exc}")
        return failure

    # -- the protocol -----------------------------------------------------------------------
    def propose(self, request: ProposalRequest) -> ProposalResult:
        n = max(0, int(request.n))
        result = ProposalResult()
        if n == 0:
            return result
        if n == 1:
            outs = [self._one(request, 0, 1)]
        else:
            with ThreadPoolExecutor(max_workers=min(n, self.parallel),
                                    thread_name_prefix=f"kforge-{self.provider}") as pool:
                outs = list(pool.map(lambda i: self._one(request, i, n), range(n)))
        for proposal, calls, error in outs:
            result.calls.extend(calls)
            if proposal is not None:
                result.proposals.append(proposal)
            if error is not None:
                result.errors.append(error)
        return result

    def repair_text(self, problem: str) -> str:
        return f"The submit_kernel call was rejected: {problem}. {self.repair_instruction}"

    def _one(self, request: ProposalRequest, index: int, n: int
             ) -> tuple[Proposal | None, list[ModelCall], str | None]:
        where = f"{self.name}: proposal {index + 1} of {n}"
        calls: list[ModelCall] = []
        body = self._initial_body(request)
        problem = ""
        for round_ in range(2):            # the request, then at most one repair
            call, response = self._exchange(body)
            calls.append(call)
            if response is None:
                return None, calls, f"{where}: request failed after {call.attempts} attempt(s): {call.error}"
            reading = self._read(response)
            if reading.problem is None and reading.args is not None:
                try:
                    proposal = to_proposal(reading.args, proposer=self.name,
                                           rationale_prefix=reading.rationale_prefix)
                    return proposal, calls, None
                except ProposalSchemaError as exc:   # _read should have caught it; be safe
                    reading.problem = str(exc)
            problem = reading.problem or "no usable answer"
            call.error = scrub(f"invalid answer: {problem}", self._secrets)
            if round_ == 0:
                body = self._repair_body(body, response, problem)
        return None, calls, scrub(f"{where}: answer still invalid after one repair request: {problem}",
                                  self._secrets)

    def _exchange(self, body: dict) -> tuple[ModelCall, Any]:
        sent = copy.deepcopy(body)
        start = time.monotonic()
        outcome = call_with_retry(lambda: self._send(body), self.retry, classify=self._classify)
        seconds = time.monotonic() - start
        response_obj = outcome.value if outcome.ok else None
        if outcome.ok:
            received = dump_response(response_obj)
            tin, tout = self._usage(response_obj)
            error = None
        else:
            failure = outcome.failure
            received = failure.body if failure is not None and isinstance(failure.body, dict) else None
            tin = tout = 0
            error = failure.description if failure is not None else repr(outcome.error)
        priced = self.prices.cost(self.provider, self.model, tin, tout)
        call = ModelCall(provider=self.provider, model=self.model, request=sent, response=received,
                         input_tokens=tin, output_tokens=tout, cost_usd=priced.usd,
                         seconds=round(seconds, 6), attempts=outcome.attempts, error=error)
        return scrub(call, self._secrets), response_obj


_FENCE = re.compile(r"```[ \t]*(cuda|cu|cpp|c\+\+|cxx|c)?[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)
_CODE_LANGS = {"cuda", "cu", "cpp", "c++", "cxx"}


def kernel_from_text(text: str) -> tuple[str, str] | None:
    """For servers that ignore tools: the first fenced ```cuda / ```cpp / ```c++ block holding a
    ``__global__`` function, and the rest of the text (the rationale); ``None`` if there is none."""
    if not text:
        return None
    for m in _FENCE.finditer(text):
        lang = (m.group(1) or "").lower()
        code = m.group(2)
        if lang in _CODE_LANGS and "__global__" in code:
            rest = (text[: m.start()] + text[m.end():]).strip()
            rest = re.sub(r"\n{3,}", "\n\n", rest)
            return code.rstrip() + "\n", rest
    return None
