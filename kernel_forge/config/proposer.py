"""The proposer's settings: where proposals come from (the run's own fields), and how models are
asked (:class:`~kernel_forge.proposers.options.ProviderOptions`, declared once with the providers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from kernel_forge.common.setting import setting
from kernel_forge.proposers.models import MODEL_SPEC, SPEC_FORMS
from kernel_forge.proposers.options import ProviderOptions

_PRICE = {"type": "number", "minimum": 0}
#: the shape of ``prices`` (PriceTable reads it and names a bad entry)
PRICES_SCHEMA = {"additionalProperties": {"anyOf": [
    {"type": "object", "additionalProperties": False, "required": ["input", "output"],
     "properties": {k: _PRICE for k in ("input", "output", "cache_read", "cached_input", "cache_write",
                                         "cache_write_1h", "cache_write_long")}},
    {"type": "array", "items": _PRICE, "minItems": 2, "maxItems": 2}]}}


@dataclass
class ProposalSource:
    """Where a run's proposals come from: which models (an ensemble taking turns or all at once), a
    replay, or neither (the built-in tuner); and the price overrides its budget counts with."""

    models: list[str] = setting(factory=list, pattern=MODEL_SPEC, must=SPEC_FORMS, flag="--model",
                                help=f"{SPEC_FORMS}; repeat for an ensemble")
    ensemble: Literal["round-robin", "parallel"] = setting(
        "round-robin", flag="--ensemble",
        help="several models: one per iteration in turn, or all every iteration")
    replay: str | None = setting(None, flag="--replay",
                                 help="replay proposals: a folder of .cu files or a JSONL of recorded answers")
    prices: dict = setting(factory=dict, json_schema=PRICES_SCHEMA,
                           help="price overrides {\"provider:model\": {\"input\": $, \"output\": $, \"cache_read\": $, "
                                "\"cache_write\": $}} per million tokens")


@dataclass
class ProposerConfig(ProviderOptions, ProposalSource):
    """Where proposals come from, and how models are asked. No model and no replay: the built-in
    tuner.  Every field is a ``kforge optimize`` option and a ``proposer`` config key: the run's own
    (:class:`ProposalSource`, first) and the provider options."""

    SECTION: ClassVar[str] = "proposer"

    @property
    def kind(self) -> str:
        return "replay" if self.replay else ("models" if self.models else "tune")
