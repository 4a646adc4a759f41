"""What a model call used and cost: its token counts, split the way the providers bill them
(:class:`Usage`), what an attempt had received when it failed (:class:`Progress`), and what such
an attempt was billed."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kernel_forge.proposers.budget import estimate_tokens
from kernel_forge.proposers.pricing import PriceTable


@dataclass
class Usage:
    """Token counts of one answer, split the way the providers bill them."""

    input: int = 0                    # input tokens billed at the plain rate (not cached)
    output: int = 0                   # output tokens, reasoning included
    reasoning: int = 0                # of output: reasoning / thinking
    cache_read: int = 0
    cache_write: int = 0              # short-lifetime (or unspecified) cache writes
    cache_write_long: int = 0         # long-lifetime writes (Anthropic 1 h, OpenAI 12 h)
    reasoning_reported: bool = True   # the provider's usage had a reasoning/thinking field
    estimated: bool = False           # counted by kforge (an attempt that failed before its usage came)

    @property
    def total_input(self) -> int:
        return self.input + self.cache_read + self.cache_write + self.cache_write_long


@dataclass
class Progress:
    """What one HTTP attempt received before it ended: whether the answer began (HTTP 200: from then
    on its input is billed), the usage the provider reported so far (Anthropic ``message_start`` /
    ``message_delta``, an OpenAI ``response.failed``), and the characters of output that arrived."""

    started: bool = False
    usage: Usage | None = None
    chars: int = 0


#: characters per output token when counting what a failed stream had sent (low: an over-count)
OUTPUT_CHARS_PER_TOKEN = 3.0


def billed_before_failure(progress: Progress, body: dict) -> Usage | None:
    """The tokens an attempt that failed after its answer began was billed for: the usage the
    provider reported so far (output at least what arrived, at a token per 3 characters), else its
    input estimated from the body (JSON characters / 3, an over-count) with that output, labelled
    ``estimated``.  None: the attempt failed before its answer began (HTTP 429/5xx bill nothing)."""
    if not progress.started:
        return None
    arrived = -(-progress.chars // int(OUTPUT_CHARS_PER_TOKEN)) if progress.chars else 0
    reported = progress.usage
    if reported is not None and reported.total_input > 0:
        if reported.output >= arrived:
            return reported
        return dataclasses.replace(reported, output=arrived, estimated=True)
    return Usage(input=estimate_tokens(body), output=arrived, reasoning_reported=False, estimated=True)



def with_billed(usage: Usage, billed: list[Usage]) -> Usage:
    """``usage`` with the tokens of the failed attempts before it (``billed``) added."""
    for u in billed:
        usage = Usage(input=usage.input + u.input, output=usage.output + u.output,
                      reasoning=usage.reasoning + u.reasoning, cache_read=usage.cache_read + u.cache_read,
                      cache_write=usage.cache_write + u.cache_write,
                      cache_write_long=usage.cache_write_long + u.cache_write_long,
                      reasoning_reported=usage.reasoning_reported and u.reasoning_reported,
                      estimated=usage.estimated or u.estimated)
    return usage


def price_of(prices: PriceTable, provider: str, model: str, usage: Usage) -> float:
    """The USD of ``usage``; an estimated one at the worst case (every input token at the dearest rate)."""
    if usage.estimated:
        return prices.worst_case(provider, model, usage.total_input, usage.output).usd
    return prices.cost(provider, model, usage.input, usage.output,
                       cache_read_tokens=usage.cache_read, cache_write_tokens=usage.cache_write,
                       cache_write_long_tokens=usage.cache_write_long).usd
