"""Tests of kernel_forge/config/proposer.py: where proposals come from, and the price overrides' shape."""
from __future__ import annotations

import dataclasses

import jsonschema
import pytest

from kernel_forge.config.proposer import PRICES_SCHEMA, ProposalSource, ProposerConfig
from kernel_forge.config import schema
from kernel_forge.proposers.options import ProviderOptions


def test_no_model_and_no_replay_is_the_built_in_tuner_and_a_replay_wins_over_models():
    assert ProposerConfig().kind == "tune"
    assert ProposerConfig(models=["openai:gpt-5"]).kind == "models"
    assert ProposerConfig(models=["openai:gpt-5"], replay="props/").kind == "replay"


def test_the_run_s_own_fields_come_first_then_the_provider_options():
    names = [f.name for f in dataclasses.fields(ProposerConfig)]
    own = [f.name for f in dataclasses.fields(ProposalSource)]
    assert own == ["models", "ensemble", "replay", "prices"] and names[:4] == own
    assert names[4:] == [f.name for f in dataclasses.fields(ProviderOptions)]
    assert ProposerConfig.SECTION == "proposer"


@pytest.mark.parametrize("prices", [
    {"openai:m": {"input": 1.0, "output": 2}},
    {"anthropic:m": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}},
    {"openai:m": [0.5, 1.5]},
    {},
])
def test_a_price_is_an_input_and_output_rate_or_a_pair(prices):
    jsonschema.validate(prices, PRICES_SCHEMA)


@pytest.mark.parametrize("prices", [
    {"openai:m": {"input": 1.0}},                       # no output rate
    {"openai:m": {"input": 1.0, "output": -2}},         # negative
    {"openai:m": {"input": 1, "output": 2, "discount": 0.5}},
    {"openai:m": [0.5]},
    {"openai:m": [0.5, 1.5, 2.5]},
    {"openai:m": "cheap"},
])
def test_a_malformed_price_is_refused(prices):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(prices, PRICES_SCHEMA)


def test_the_run_schema_carries_the_price_shape():
    prop = schema.section_schema("proposer", ProposerConfig)["properties"]["prices"]
    assert prop["additionalProperties"] == PRICES_SCHEMA["additionalProperties"]
