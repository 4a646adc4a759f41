"""The proposer protocol shared by anthropic, openai, replay and tune.

The loop builds a :class:`ProposalRequest` (prompt text already rendered, never holding holdout
cases) and asks a proposer for up to ``n`` :class:`Proposal` s.  Model-backed proposers also
return one :class:`ModelCall` per HTTP exchange, which the evidence layer writes as
``model-NNN.json`` (with any API key scrubbed).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class Proposal:
    """One candidate as a proposer returns it."""

    source: str                                  # full .cu text (may carry a // kforge: header)
    rationale: str = ""
    launch: dict | None = None                   # {"grid": [...], "block": [...], "shared_mem": ...}
    tunables: dict[str, list] | None = None      # {"BLOCK": [64, 128, 256]}
    proposer: str = ""                           # e.g. "anthropic:claude-sonnet-5-5", "replay", "tune"
    parent: str | None = None                    # attempt id this was derived from
    label: str = ""                              # e.g. a replay file name
    direction: str = ""                          # the direction this proposal was asked to take
    calls: list[int] = field(default_factory=list)  # indices into ProposalResult.calls that produced it
    predicted_speedup: float | None = None       # the speedup over its parent the model expects
    technique: str = ""                          # the main technique, as the model names it
    model_direction: str = ""                    # the direction as the model states it


@dataclass
class ModelCall:
    """One request/response exchange with a model, as written to evidence."""

    provider: str                 # "anthropic" | "openai"
    model: str
    request: dict                 # the JSON body sent (no headers, no key)
    response: dict | None         # the JSON body received (None on transport failure)
    input_tokens: int = 0         # all input tokens, cache reads and writes included
    output_tokens: int = 0        # all output tokens, reasoning/thinking included
    cost_usd: float = 0.0
    seconds: float = 0.0
    attempts: int = 1             # HTTP attempts including retries
    error: str | None = None
    reasoning_tokens: int = 0     # of output_tokens: reasoning (OpenAI) / thinking (Anthropic)
    cache_read_tokens: int = 0    # of input_tokens: read from the provider's prompt cache
    cache_write_tokens: int = 0   # of input_tokens: written to the prompt cache (every lifetime)
    timeouts: int = 0             # of attempts: those that timed out
    cache_write_long_tokens: int = 0  # of cache_write_tokens: with the long lifetime (Anthropic 1 h, OpenAI 12 h)
    reasoning_reported: bool = True   # False: the answer's usage had no reasoning/thinking field
    capability: str = ""          # the capability-table entry the request was built from
    plan: dict | None = None      # how it was built: thinking, effort, output limit, cache plan, budget check
    #: the tokens (and cost) include a count by kforge, not the provider's: an attempt that failed after
    #: its answer began, before its usage came (its input estimated from the body sent, a token per 3 characters)
    usage_estimated: bool = False
    #: of attempts: those that failed after their answer began (HTTP 200), whose tokens are counted here
    billed_failed_attempts: int = 0


@dataclass
class ProposalSlot:
    """One of a request's proposals: what it is asked and what it starts from."""

    #: its dynamic user prompt (after the static prefix); None: the request's ``prompt``
    prompt: str | None = None
    direction: str = ""           # the direction it is to take
    #: the source of the kernel it builds on (the fix target, else the current best; "" for none,
    #: e.g. a new translation): a model may answer with search/replace edits against it instead of
    #: the whole file
    parent_source: str = ""
    #: the attempt it is to start from (the search strategy's choice; the best for greedy)
    parent: str = ""
    technique: str = ""           # its technique tag (``"cmp:regblock"``, ``"crossover"`` ...)
    second_parent: str | None = None   # a crossover's other parent (an attempt id)


@dataclass
class ProposalRequest:
    system: str                   # system prompt
    prompt: str                   # user prompt after the static prefix: best kernel, history, failures
    n: int = 1                    # how many proposals wanted
    iteration: int = 0
    #: the part of the user prompt that is the same for every call of a run (task, device,
    #: reference); the full user prompt is ``static_prefix + "\n\n" + prompt``.  Providers that
    #: cache prompts (Anthropic ``cache_control``) mark it as a cacheable block.
    static_prefix: str = ""
    #: one record per proposal (its own prompt, direction, parents); when empty, every one of the
    #: ``n`` proposals uses ``prompt`` and builds on nothing given
    slots: list[ProposalSlot] = field(default_factory=list)
    #: labels whose every setting was gated or ruled out: the built-in tuner proposes those templates no more
    spent: list[str] = field(default_factory=list)
    #: labels with a passing attempt: the built-in tuner searches a bound pattern once its gate attempt passed
    passed: list[str] = field(default_factory=list)

    def prompt_for(self, index: int) -> str:
        """The dynamic user prompt of proposal ``index`` (0-based)."""
        if index < len(self.slots) and self.slots[index].prompt is not None:
            return self.slots[index].prompt
        return self.prompt

    def parent_for(self, index: int) -> str | None:
        """The source proposal ``index`` builds on, if the loop gave one (an empty entry: none; a
        request of one slot gives its source to every proposal)."""
        if index < len(self.slots):
            return self.slots[index].parent_source or None
        return (self.slots[0].parent_source or None) if len(self.slots) == 1 else None

    def full_prompt(self, index: int = 0) -> str:
        body = self.prompt_for(index)
        return f"{self.static_prefix}\n\n{body}" if self.static_prefix else body


@dataclass
class ProposalResult:
    proposals: list[Proposal] = field(default_factory=list)
    calls: list[ModelCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)   # proposer-side failures (as data)
    #: every call of this request failed to connect (wrong --base-url, no network): the loop stops
    unreachable: bool = False
    #: a call was not made because its worst-case cost did not fit what is left of --budget-usd
    budget_exhausted: bool = False


class Exhausted(Exception):
    """Raised by a proposer that has nothing more to propose (replay at its end)."""


class Proposer(Protocol):
    name: str
    #: False for proposers that ignore the prompt (the built-in tuner): the loop then builds none
    needs_prompt: bool

    def propose(self, request: ProposalRequest) -> ProposalResult: ...
