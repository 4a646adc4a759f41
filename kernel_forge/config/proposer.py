"""The proposer's settings: where proposals come from, and how models are asked."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from kernel_forge.config.setting import DAY_S, MAX_TOKENS, setting

#: a model spec as every entry point accepts it (the provider checks the rest)
MODEL_SPEC = r"^(anthropic|openai):.+$"
_PRICE = {"type": "number", "minimum": 0}
#: the shape of ``prices`` (PriceTable reads it and names a bad entry)
PRICES_SCHEMA = {"additionalProperties": {"anyOf": [
    {"type": "object", "additionalProperties": False, "required": ["input", "output"],
     "properties": {k: _PRICE for k in ("input", "output", "cache_read", "cached_input", "cache_write",
                                         "cache_write_1h", "cache_write_long")}},
    {"type": "array", "items": _PRICE, "minItems": 2, "maxItems": 2}]}}
EFFORTS = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


@dataclass
class ProposerConfig:
    """Where proposals come from, and how models are asked. No model and no replay: the built-in
    tuner.  Every field is a ``kforge optimize`` option and a ``proposer`` config key."""

    SECTION: ClassVar[str] = "proposer"

    models: list[str] = setting(factory=list, pattern=MODEL_SPEC, must="anthropic:MODEL or openai:MODEL",
                                flag="--model", help="anthropic:MODEL or openai:MODEL; repeat for an ensemble")
    base_url: str | None = setting(None, flag="--base-url",
                                   help="the models' endpoint (http:// or https://): vLLM, Ollama, llama.cpp, a gateway")
    ensemble: Literal["round-robin", "parallel"] = setting(
        "round-robin", flag="--ensemble",
        help="several models: one per iteration in turn, or all every iteration")
    replay: str | None = setting(None, flag="--replay",
                                 help="replay proposals: a folder of .cu files or a JSONL of recorded answers")
    prices: dict = setting(factory=dict, json_schema=PRICES_SCHEMA,
                           help="price overrides {\"provider:model\": {\"input\": $, \"output\": $, \"cache_read\": $, "
                                "\"cache_write\": $}} per million tokens")
    max_tokens: int | None = setting(
        None, min=1, max=MAX_TOKENS, flag="--max-output-tokens",
        help="output tokens per model request, thinking included (default: the model's entry: room to think plus a "
             "kernel, 32000 within its maximum)")
    max_tokens_cap: int | None = setting(
        None, min=1, max=MAX_TOKENS, flag="--max-output-tokens-cap",
        help="most output tokens the one retry of a cut-off answer may ask for (default: the model's maximum)")
    temperature: float | None = setting(
        None, min=0, max=2,
        help="sampling temperature; sent only to models that take one (the capability table), dropped for the run "
             "if the model rejects it")
    reasoning_effort: EFFORTS | None = setting(
        None, help="OpenAI reasoning.effort / Anthropic output_config.effort (default: high, where the model takes "
                   "an effort); stepped down to the highest level the model takes")
    thinking_budget: int | None = setting(
        None, min=1024, max=MAX_TOKENS,
        help="Anthropic extended thinking budget_tokens (>= 1024, manual thinking); a model with adaptive thinking "
             "only gets adaptive thinking")
    thinking: Literal["adaptive", "disabled"] | None = setting(
        None, help="Anthropic thinking mode (default: on where the model has it: adaptive, else a budget); disabled "
                   "is refused by models that always think")
    request_timeout_s: float = setting(
        120.0, above=0, max=DAY_S, flag="--request-timeout",
        help="seconds one model request may take; when streamed, the longest silence between chunks")
    timeout_retries: int = setting(2, min=0, max=100, help="further attempts after a model request timed out")
    max_attempts: int = setting(5, min=1, max=100, help="HTTP attempts per model request on transient failures (429, 5xx, "
                                               "dropped connections)")
    stream: bool = setting(True, help="stream model answers, so that a long answer cannot outlast the timeout")
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = setting(
        None, help="OpenAI-compatible servers (Chat Completions): the field for the output limit (default: the "
                   "server's entry, max_tokens)")
    prompt_cache: bool = setting(True, help="cache the shared prompt prefix (Anthropic cache_control breakpoints, "
                                            "OpenAI prompt_cache_key)")
    cache_ttl: Literal["auto", "short", "long"] = setting(
        "auto", help="prompt-cache lifetime of the run's part of the prompt: short (5 min / 30 min), long (1 h / "
                     "12 h), or auto (long once an iteration takes longer than the short one)")
    answer_format: Literal["fenced", "tool"] = setting(
        "fenced", help="how a model answers: the kernel in a fenced code block (or search/replace edits) and a small "
                       "JSON part, or a submit_kernel tool call")
    context_tokens: int | None = setting(
        None, min=1024, max=MAX_TOKENS, flag="--context-tokens",
        help="the model's context window in tokens (default: its capability entry; give it for a local server, "
             "llama.cpp, Ollama or vLLM, whose served window the table cannot know); every call is checked against "
             "it before it is made")
    server: Literal["auto", "vllm", "llama.cpp", "ollama", "sglang"] = setting(
        "auto", help="the OpenAI-compatible server behind --base-url, for its capability entry (auto: a generic one)")

    @property
    def kind(self) -> str:
        return "replay" if self.replay else ("models" if self.models else "tune")
