"""``kforge optimize`` options generated from LoopConfig, ProposerConfig and GateOptions: names,
help from the declaration, and bad values refused before anything runs (no GPU, no network).  Which
value wins (command line over --config over defaults) is tested in test_cli_run.py."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.app.cli_run import optimize_options
from kernel_forge.config.build import OnCommandLine, check_value
from kernel_forge.common.setting import Spec, fields_of, setting
from kernel_forge.common.errors import InputError
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.config.file import load_config_file

from tests.support.option_probe import SECTIONS, probe, run_probe

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = str(ROOT / "manifests" / "vector_add.json")


@dataclass
class LoopPlus(LoopConfig):
    """LoopConfig as another engineer might extend it."""

    widgets: int = setting(3, min=1, help="how many widgets to frob per iteration")
    chatty: bool = setting(False, help="say more about each attempt")
    settle_s: float = setting(1.5, above=0, help="seconds to settle")


# ------------------------------------------------------------------------------ generation

def test_every_field_that_a_command_line_can_carry_is_an_option():
    opts = optimize_options()
    covered = {(o.section, o.name) for o in opts}
    for section, cls in SECTIONS:
        for f in dataclasses.fields(cls):
            if f.name == "prices":                           # a mapping: config file only
                assert (section, f.name) not in covered
                continue
            assert (section, f.name) in covered, (section, f.name)
    flags = [d for o in opts for decl in o.decls for d in decl.split("/")]
    assert len(flags) == len(set(flags))                     # no two fields share a name


def test_help_is_the_declared_help():
    by = {(o.section, o.name): o for o in optimize_options()}
    assert by[("loop", "patience")].help.startswith("stop after this many iterations without improvement")
    warmup = next(f for f in fields_of(GateOptions) if f.name == "warmup")
    assert by[("gate", "warmup")].help == f"{warmup.spec.help} [default: 10]"
    assert by[("proposer", "thinking_budget")].help.startswith("Anthropic extended thinking budget_tokens")
    assert "[default: 120.0]" in by[("proposer", "request_timeout_s")].help
    assert "the model's entry" in by[("proposer", "max_tokens")].help     # no fixed default: the capability table


def test_existing_option_names_keep_working():
    r, conf = run_probe("--time-limit", 5, "--timeout", 3, "--no-flush", "--seed", 4, "--quick", "--sanitize",
                        "--model", "openai:gpt-5", "--model", "anthropic:claude-sonnet-4-5", "--max-tokens", 100,
                        "--max-iterations", 2, "--candidates", 3, "--budget-usd", 1.5, "--patience", 2,
                        "--target-speedup", 1.2, "--tune-budget", 8, "--hints", "use float4", "--warmup", 1,
                        "--reps", 5, "--arch", "sm_90", "--base-url", "http://localhost:8000/v1",
                        "--ensemble", "parallel", "--replay", "props/")
    assert r.exit_code == 0, r.output
    loop, gate, prop = conf["loop"], conf["gate"], conf["proposer"]
    assert (loop["time_limit_s"], loop["max_tokens"], loop["max_iterations"], loop["candidates"]) == (5.0, 100, 2, 3)
    assert (loop["budget_usd"], loop["patience"], loop["target_speedup"], loop["tune_budget"]) == (1.5, 2, 1.2, 8)
    assert loop["hints"] == "use float4"
    assert (gate["launch_timeout_s"], gate["flush_l2"], gate["seed"], gate["sanitize"]) == (3.0, False, 4, True)
    assert (gate["warmup"], gate["reps"], gate["arch"]) == (1, 5, "sm_90")
    assert (gate["extra_draws"], gate["repeat_check"], gate["check_after_timing"]) == (0, False, False)  # --quick
    assert prop["models"] == ["openai:gpt-5", "anthropic:claude-sonnet-4-5"]
    assert (prop["base_url"], prop["ensemble"], prop["replay"]) == ("http://localhost:8000/v1", "parallel", "props/")


def test_a_field_added_to_a_dataclass_appears_as_an_option():
    sections = [("loop", LoopPlus), ("proposer", ProposerConfig), ("gate", GateOptions)]
    by = {o.name: o for o in optimize_options(sections) if o.section == "loop"}
    assert by["widgets"].decls == ("--widgets",) and by["widgets"].help == "how many widgets to frob per iteration [default: 3]"
    assert by["chatty"].decls == ("--chatty/--no-chatty",) and by["chatty"].help.startswith("say more")
    assert by["settle_s"].decls == ("--settle",)                  # seconds: the unit is not in the name

    r, conf = run_probe("--widgets", 5, "--chatty", "--settle", 0.5, sections=sections)
    assert r.exit_code == 0, r.output
    assert (conf["loop"]["widgets"], conf["loop"]["chatty"], conf["loop"]["settle_s"]) == (5, True, 0.5)
    r = CliRunner().invoke(probe(sections), ["--help"])
    assert "--widgets INTEGER" in r.output and "how many widgets to frob" in r.output
    r, _ = run_probe("--widgets", 0, sections=sections)           # its declared bound, checked
    assert r.exit_code == 2 and "--widgets 0: must be at least 1, got 0" in r.stderr


def test_a_clashing_new_field_gets_its_sections_name():
    @dataclass
    class LoopArch(LoopConfig):
        arch: str = setting("auto", help="which search architecture")

    opts = optimize_options([("loop", LoopArch), ("proposer", ProposerConfig), ("gate", GateOptions)])
    names = {(o.section, o.name): o.decls for o in opts}
    assert names[("gate", "arch")] == ("--arch",) and names[("loop", "arch")] == ("--loop-arch",)


# ------------------------------------------------------------------------------ bad values

@pytest.mark.parametrize("section, values, expected", [
    ("loop", {"max_iterations": "seven"}, "$.loop.max_iterations: expected an integer, got 'seven'"),
    ("loop", {"candidates": 0}, "$.loop.candidates: must be at least 1, got 0"),
    ("loop", {"crossover_every": -1}, "$.loop.crossover_every: must be at least 0, got -1"),
    ("loop", {"refine": "yes"}, "$.loop.refine: expected true or false"),
    ("gate", {"launch_timeout_s": "fast"}, "$.gate.launch_timeout_s: expected a number"),
    ("proposer", {"models": "openai:gpt-5"}, "$.proposer.models: expected a list"),
    ("proposer", {"models": ["gpt-5"]}, "$.proposer.models[0]"),
    ("proposer", {"ensemble": "random"}, "$.proposer.ensemble: must be one of 'round-robin', 'parallel'"),
    ("proposer", {"max_tokens": 0}, "$.proposer.max_tokens: must be at least 1, got 0"),
    ("proposer", {"stream": None}, "$.proposer.stream: a value is required"),
    ("proposer", {"answer_format": "xml"}, "$.proposer.answer_format: must be one of 'fenced', 'tool'"),
    ("proposer", {"thinking_budget": 100}, "$.proposer.thinking_budget: must be at least 1024, got 100"),
])
def test_bad_config_values_name_their_json_path(tmp_path, section, values, expected):
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps({section: values}))
    with pytest.raises(InputError) as info:
        load_config_file(p)
    assert str(info.value).startswith(f"{p}: ") and expected in str(info.value)


@pytest.mark.parametrize("args, expected", [
    (["--candidates", "-1"], "--candidates -1: must be at least 1, got -1"),
    (["--patience", "0"], "--patience 0: must be at least 1"),
    (["--budget-usd", "-2"], "--budget-usd -2.0: must be at least 0, got -2.0"),
    (["--request-timeout", "0", "--model", "openai:gpt-5"], "--request-timeout 0.0: must be > 0"),
    (["--model", "gpt-5"], "--model 'gpt-5': must be anthropic:MODEL or openai:MODEL"),
    (["--base-url", "ftp://host/v1", "--model", "openai:m"], "is not an http:// or https:// URL"),
    (["--base-url", "localhost:8000", "--model", "openai:m"], "is not an http:// or https:// URL"),
    (["--base-url", "http://localhost:8000/v1"], "--base-url (proposer.base_url) needs --model"),
    (["--thinking-budget", "512", "--model", "anthropic:claude-sonnet-4-5"], "must be at least 1024"),
    (["--thinking-budget", "2048", "--model", "openai:gpt-5"], "applies to anthropic:MODEL models only"),
    (["--reasoning-effort", "minimal", "--model", "anthropic:claude-sonnet-4-5"], "Anthropic models take low"),
    (["--max-output-tokens", "9000", "--max-output-tokens-cap", "4000", "--model", "openai:gpt-5"],
     "--max-output-tokens-cap (4000) is below --max-output-tokens (9000)"),
    (["--replay", "props/", "--model", "openai:gpt-5"], "--replay and --model are exclusive"),
    (["--model", "openai:llama-3.1-70b", "--base-url", "http://127.0.0.1:9/v1", "--budget-usd", "1"],
     "no price is known for openai:llama-3.1-70b"),
])
def test_bad_options_are_refused_before_any_gpu_probe(kforge, tmp_path, args, expected):
    r = kforge("optimize", MANIFEST, "--runs-dir", tmp_path / "runs", *args)
    assert r.exit_code == 2, r.output + r.stderr
    assert expected in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_the_gate_commands_offer_every_gate_setting_but_the_pool_of_gpus():
    from kernel_forge.app.cli_common import gate_command_options

    offered = {o.name for o in gate_command_options()}
    assert offered == {f.name for f in dataclasses.fields(GateOptions)} - {"devices"}
    for command in ("eval", "replay", "gate"):
        r = CliRunner().invoke(cli, [command, "--help"])
        assert "--max-noise FLOAT" in r.output and "--no-flush" in r.output and "--quick" in r.output, command


def test_eval_takes_the_gate_options_as_typed_over_quick(monkeypatch, tmp_path):
    from kernel_forge.ci import evaluate

    seen = {}

    def no_gpu(task, options):
        seen["options"] = options
        raise InputError("stop here (test)")
    monkeypatch.setattr(evaluate, "default_gate", no_gpu)
    r = CliRunner().invoke(cli, ["eval", MANIFEST, "--quick", "--reps", "7", "--no-flush", "--extra-draws", "2",
                                 "--max-noise", "0.01"])
    assert r.exit_code == 2 and "stop here" in r.stderr
    o = seen["options"]
    assert (o.reps, o.flush_l2, o.extra_draws, o.repeat_check, o.max_noise, o.warmup) == (7, False, 2, False, 0.01, 10)


def test_check_value_units():
    where = OnCommandLine({("s", "x"): "--x"})

    def check(value, kind, spec=Spec()):
        return check_value(value, kind, spec, where, "s", "x")

    assert check((1, 2), list[int]) == [1, 2]
    assert check(3, float) == 3.0 and isinstance(check(3, float), float)
    assert check(None, int | None) is None
    for bad, kind in ((True, int), (float("nan"), float), (1.5, int), ("1", float)):
        with pytest.raises(InputError, match="--x"):
            check(bad, kind)
    with pytest.raises(InputError, match="must be > 0"):
        check(0.0, float, Spec(above=0))


def test_malformed_price_overrides_are_refused_naming_the_entry(kforge, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"proposer": {"models": ["openai:gpt-5"],
                                            "prices": {"openai:gpt-5": {"input": 1.0, "output": -2}}}}))
    r = kforge("optimize", MANIFEST, "--config", cfg, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2 and "$.proposer.prices.openai:gpt-5.output" in r.stderr
    assert not (tmp_path / "runs").exists()
