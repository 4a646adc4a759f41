"""The budget line (issue 32 item 7): printed before a run, a dry run and a resume; a default
--budget-usd of $20 (0: no limit) that does not apply to a model with no price."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.app.run_setup import run_budget
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig

from tests.support.paths import ROOT

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


@pytest.fixture
def kforge(monkeypatch, clean_env):
    monkeypatch.chdir(ROOT)
    return lambda *a: CliRunner().invoke(cli, [str(x) for x in a])


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_a_dry_run_prints_the_budget_line_with_the_default_budget_and_the_repair_calls(kforge):
    r = kforge("optimize", "manifests/vector_add.json", "--dry-run", "--model", "anthropic:claude-opus-5-5")
    assert r.exit_code == 0, r.output
    assert "=== system prompt ===" in r.stdout and "[kforge] budget" not in r.stdout
    # 7 iterations x 4 proposals, each asked, asked again when cut off, and repaired once
    assert "[kforge] budget (worst case, before it starts): 7 iterations x 4 proposals = 28 proposals, at most " \
           "84 model calls" in r.stderr
    assert "--budget-usd 20 stops it at $20.00; --budget-usd 0 lifts it" in r.stderr


def test_budget_usd_0_is_no_limit_and_the_line_says_so(kforge):
    r = kforge("optimize", "manifests/vector_add.json", "--dry-run", "--model", "anthropic:claude-opus-5-5",
               "--budget-usd", "0")
    assert r.exit_code == 0, r.output
    assert "no --budget-usd limit" in r.stderr and "stops it at $" not in r.stderr
    assert run_budget(LoopConfig(budget_usd=0), ProposerConfig(models=["anthropic:claude-opus-5-5"])) is None


def test_the_default_budget_does_not_apply_to_a_model_with_no_price_and_a_given_one_is_refused(kforge):
    local = ["--model", "openai:my-local-model", "--base-url", "http://127.0.0.1:9"]
    r = kforge("optimize", "manifests/vector_add.json", "--dry-run", *local)
    assert r.exit_code == 0, r.output
    assert "the default --budget-usd 20 does not apply: no price is known for openai:my-local-model" in r.stderr
    prop = ProposerConfig(models=["openai:my-local-model"], base_url="http://127.0.0.1:9")
    assert run_budget(LoopConfig(), prop) is None and run_budget(LoopConfig(budget_usd=5), prop) == 5
    r = kforge("optimize", "manifests/vector_add.json", *local, "--budget-usd", "5")
    assert r.exit_code == 2 and "no price is known for openai:my-local-model" in r.stderr


def test_resume_and_resume_dry_run_print_the_budget_line_with_what_was_spent(kforge, tmp_path, loopback):
    from tests.support.fakes import vector_add
    from tests.support.loopback import tool
    from kernel_forge.proposers.models import make_model_proposer
    from tests.support.loop_runs import new_run

    spec = "anthropic:claude-sonnet-5-5"
    loopback.script("anthropic", tool({"source": vector_add("pass 300"), "rationale": "r"}, input_tokens=20_000))
    proposer = make_model_proposer(spec, base_url=loopback.anthropic_base_url, api_key="k", request_timeout_s=5)
    opt = new_run(tmp_path, proposer=proposer, prop=ProposerConfig(models=[spec], base_url=loopback.url),
                  max_iterations=1, budget_usd=7)
    spent = opt.run()["cost_usd"]
    assert spent > 0
    run = opt.run_dir.path
    dry = kforge("optimize", "--resume", run, "--dry-run", "--max-iterations", "3")
    assert dry.exit_code == 0, dry.output
    assert "[kforge] budget (worst case, before it starts): 3 iterations" in dry.stderr
    assert f"--budget-usd 7 stops it at $7.00 (${spent:.2f} spent before this resume)" in dry.stderr
    from tests.support.gpu_probe import gpu_present
    if gpu_present():                  # a real resume would run; the line before it is the dry run's
        return
    real = kforge("optimize", "--resume", run, "--max-iterations", "3")    # no GPU here: it stops at the probe
    assert "[kforge] budget (worst case, before it starts): 3 iterations" in real.stderr
    assert f"(${spent:.2f} spent before this resume)" in real.stderr
