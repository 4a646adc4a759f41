"""kernel_forge.proposers.options: the provider options, declared once, and every place made from them."""
from __future__ import annotations

import dataclasses

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.common.setting import SPEC, fields_of
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.proposers.options import ProviderOptions, choices, for_provider, names, only_for, options_of


def test_the_config_section_takes_each_provider_option_as_declared_not_a_copy():
    config = {f.name: f for f in fields_of(ProposerConfig)}
    for f in dataclasses.fields(ProviderOptions):
        assert config[f.name].spec is f.metadata[SPEC], f.name          # the same declaration object
    assert set(config) - set(names()) == {"models", "ensemble", "replay", "prices"}


def test_each_provider_option_is_a_command_line_option_with_its_declared_flag_and_help():
    from kernel_forge.app.cli_run import optimize_options

    offered = {o.name: o for o in optimize_options() if o.section == "proposer"}
    assert set(names()) <= set(offered)
    assert offered["max_tokens"].flag == "--max-output-tokens" and offered["request_timeout_s"].flag == "--request-timeout"
    assert offered["thinking_budget"].help.startswith("Anthropic extended thinking budget_tokens")


def test_choices_and_the_one_provider_come_from_the_declaration():
    assert choices("answer_format") == ("fenced", "tool")
    assert choices("thinking") == ("adaptive", "disabled")
    assert choices("max_tokens") == ()
    assert (only_for("thinking_budget"), only_for("server"), only_for("max_tokens")) == ("anthropic", "openai", None)


def test_an_ensemble_s_options_reach_each_provider_without_the_other_s_own():
    both = ProviderOptions(thinking="adaptive", thinking_budget=None, server="vllm", max_tokens_field="max_tokens",
                           max_tokens=2000)
    to_openai, to_anthropic = for_provider(both, "openai"), for_provider(both, "anthropic")
    assert (to_openai.thinking, to_openai.server, to_openai.max_tokens_field) == (None, "vllm", "max_tokens")
    assert (to_anthropic.thinking, to_anthropic.server, to_anthropic.max_tokens_field) == ("adaptive", "auto", None)
    assert to_openai.max_tokens == to_anthropic.max_tokens == 2000


def test_the_options_of_a_run_s_config_are_its_provider_part():
    cfg = ProposerConfig(models=["openai:gpt-5"], max_tokens=777, base_url="http://localhost:1/v1")
    assert options_of(cfg) == ProviderOptions(max_tokens=777, base_url="http://localhost:1/v1")


def test_an_option_one_provider_takes_is_refused_for_a_run_without_that_provider():
    from kernel_forge.app.run_setup import check_proposer

    with pytest.raises(InputError) as info:
        check_proposer(ProposerConfig(models=["anthropic:claude-sonnet-4-5"], max_tokens_field="max_tokens"))
    assert str(info.value) == ("--max-tokens-field (proposer.max_tokens_field) applies to openai:MODEL models only; "
                               "the run asks anthropic:claude-sonnet-4-5")
