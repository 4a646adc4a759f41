"""The settings of ``kforge init --describe``: how it asks its model and checks the answers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernel_forge.proposers.models import MODEL_SPEC, SPEC_FORMS
from kernel_forge.proposers.options import EFFORTS
from kernel_forge.common.setting import DAY_S, MAX_TOKENS, setting


@dataclass
class DescribeConfig:
    """How ``kforge init --describe`` asks its model and checks the answers (every field is an option)."""

    SECTION: ClassVar[str] = "describe"

    model: str | None = setting(None, pattern=MODEL_SPEC, must=SPEC_FORMS, flag="--model",
                                help=f"{SPEC_FORMS} that writes the task (key from ANTHROPIC_API_KEY "
                                     "/ OPENAI_API_KEY)")
    base_url: str | None = setting(None, flag="--base-url", help="the model's endpoint (http:// or https://): an "
                                                                 "OpenAI-compatible server, a gateway")
    replay: str | None = setting(None, flag="--replay", help="a folder of recorded answers (the NAME_describe folder "
                                                             "of an earlier init) instead of a model")
    max_tokens: int | None = setting(None, min=1, max=MAX_TOKENS, flag="--max-output-tokens",
                                     help="output tokens per answer, thinking included (default: the model's entry in "
                                          "the capability table)")
    budget_usd: float | None = setting(None, above=0, max=10**9, help="most the model calls may cost; each is checked against "
                                                           "its worst case before it is made")
    request_timeout_s: float = setting(300.0, above=0, max=DAY_S, flag="--request-timeout",
                                       help="seconds one model request may take (between chunks when streamed)")
    temperature: float | None = setting(None, min=0, max=2, help="sampling temperature; sent only to models that take "
                                                                 "one (the capability table)")
    reasoning_effort: EFFORTS | None = setting(None, help="OpenAI reasoning.effort / Anthropic output_config.effort "
                                                          "(default: high, where the model takes an effort)")
    repairs: int = setting(1, min=0, max=100, help="turns an unusable answer gets to be repaired, the reason quoted (0: none; "
                                                   "only checks that run nothing the model wrote: schema, screen, NVRTC)")
    extra_shapes: int = setting(4, min=0, max=10**4, help="random shapes beside the task's cases on which the two witnesses "
                                                          "must agree (recorded; kforge validate --accept draws them)")
    initial: bool = setting(False, help="also write the witness as the task's initial kernel NAME.cu (default: none; "
                                        "optimize translates the reference first)")
