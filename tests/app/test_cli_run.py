"""Tests of kernel_forge/app/cli_run.py: `kforge optimize` (its settings resolved, --dry-run, --resume), and `report`."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig

from tests.support.option_probe import run_probe

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"


# ------------------------------------------------------------------------------ which value wins

def test_command_line_wins_over_config_which_wins_over_defaults(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"loop": {"max_iterations": 3, "patience": 2},
                               "gate": {"warmup": 5, "flush_l2": False, "extra_draws": 2},
                               "proposer": {"models": ["openai:gpt-5"], "max_tokens": 4096, "stream": False}}))
    # --max-iterations 7 and --flush equal the defaults: typed, they still win over the file
    r, conf = run_probe("--config", cfg, "--max-iterations", 7, "--flush", "--max-output-tokens", 2048)
    assert r.exit_code == 0, r.output
    assert (conf["loop"]["max_iterations"], conf["loop"]["patience"], conf["loop"]["candidates"]) == (7, 2, 4)
    assert (conf["gate"]["warmup"], conf["gate"]["flush_l2"], conf["gate"]["extra_draws"]) == (5, True, 2)
    assert (conf["proposer"]["models"], conf["proposer"]["max_tokens"], conf["proposer"]["stream"]) == \
        (["openai:gpt-5"], 2048, False)
    # --quick lies between the file and the command line
    r, conf = run_probe("--config", cfg, "--quick", "--extra-draws", 3)
    assert (conf["gate"]["extra_draws"], conf["gate"]["repeat_check"]) == (3, False)


def test_defaults_without_anything_are_the_dataclass_defaults():
    r, conf = run_probe()
    assert r.exit_code == 0
    assert conf == {"loop": dataclasses.asdict(LoopConfig()), "proposer": dataclasses.asdict(ProposerConfig()),
                    "gate": dataclasses.asdict(GateOptions())}


def test_quick_wins_over_the_config_file_and_leaves_its_other_settings(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"gate": {"extra_draws": 2, "repeat_check": True, "warmup": 5}}))
    r, conf = run_probe("--config", cfg, "--quick")
    assert r.exit_code == 0, r.output
    assert (conf["gate"]["extra_draws"], conf["gate"]["repeat_check"], conf["gate"]["warmup"]) == (0, False, 5)
    r, conf = run_probe("--config", cfg)
    assert (conf["gate"]["extra_draws"], conf["gate"]["repeat_check"]) == (2, True)


# ------------------------------------------------------------------------------ --dry-run

def test_optimize_dry_run_prints_the_first_prompt_without_a_gpu(kforge):
    r = kforge("optimize", "manifests/vector_add.json", "--dry-run", "--hints", "try float4 loads")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "=== system prompt ===" in out and "Answer format:" in out
    assert 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)' in out
    assert "- `float* c`: shape [n], output" in out
    assert "Default launch: grid [cdiv(n, 256)], block [256]" in out
    assert "try float4 loads" in out and "not measured yet" in out
    assert "n=1000003" in out                      # a shown case
    assert "3145745" not in out                    # the holdout case's size never appears
    assert "Cases you are shown" in out


def test_optimize_dry_run_needs_a_manifest(kforge):
    r = kforge("optimize", "--dry-run")
    assert r.exit_code == 2
    assert "--dry-run needs a MANIFEST" in r.stderr


def test_dry_run_shows_the_hints_of_its_config_and_the_command_line_wins(kforge, tmp_path):
    """--dry-run read no --config: its hints were missing from the printed prompt."""
    m = MANIFEST
    cfg = tmp_path / "opt.json"
    cfg.write_text(json.dumps({"manifest": str(m), "loop": {"hints": "stage the tile in shared memory"}}))
    r = kforge("optimize", "--dry-run", "--config", cfg)
    assert r.exit_code == 0, r.stderr
    assert "# Hints\nstage the tile in shared memory" in r.stdout
    r = kforge("optimize", m, "--dry-run", "--config", cfg, "--hints", "use float4 loads")
    assert r.exit_code == 0 and "use float4 loads" in r.stdout and "stage the tile" not in r.stdout


# ------------------------------------------------------------------------------ a run: what it refuses, and Ctrl-C

class _InterruptedRun:
    """An optimizer that a Ctrl-C stops in the middle of its run."""

    def __init__(self, run_dir: Path):
        self.run_dir = type("RunDir", (), {"path": run_dir})()
        self.gate = self
        self.closed = False

    def run(self):
        raise KeyboardInterrupt

    def close(self):
        self.closed = True


def test_an_interrupted_optimize_says_how_to_resume_closes_the_gate_and_exits_130_at_the_edge(monkeypatch, tmp_path):
    from kernel_forge.app import run_setup

    started = []

    def start_run(manifest, *args, **kwargs):
        started.append(_InterruptedRun(tmp_path / "run-001"))
        return started[0]

    monkeypatch.setattr(run_setup, "start_run", start_run)
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(cli, ["optimize", "manifests/vector_add.json", "--max-iterations", "1"],
                           catch_exceptions=False)
    assert r.exit_code == 130
    assert f"[kforge] interrupted; resume with: kforge optimize --resume {tmp_path / 'run-001'}" in r.stderr
    assert r.stderr.rstrip().endswith("kforge: interrupted")        # worded by handle_errors, as every interrupt
    assert started and started[0].closed


def test_resume_takes_only_loop_options(kforge, tmp_path):
    r = kforge("optimize", "--resume", tmp_path, "--model", "openai:gpt-5", "--warmup", 3)
    assert r.exit_code == 2 and "not --model, --warmup" in r.stderr


def test_a_device_file_is_for_a_dry_run_only(kforge, tmp_path):
    r = kforge("optimize", MANIFEST, "--device", ROOT / "kernel_forge" / "data" / "devices" / "h200.json",
               "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2
    assert r.stderr == "kforge: error: --device FILE is for --dry-run; a run describes the GPU it runs on\n"
    assert not (tmp_path / "runs").exists()


def test_a_run_needs_a_manifest_and_a_dry_run_of_a_recorded_run_takes_none(kforge, tmp_path):
    r = kforge("optimize", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2 and "give a MANIFEST (or \"manifest\" in --config), or --resume RUN" in r.stderr
    r = kforge("optimize", "--dry-run", "--resume", tmp_path, MANIFEST)
    assert r.exit_code == 2 and ("--dry-run --resume RUN takes the run's own manifest, device and config; give none "
                                 "of them") in r.stderr


def test_report_needs_a_run_folder_with_its_summary_and_history(kforge, tmp_path):
    r = kforge("report", tmp_path)
    assert r.exit_code == 2 and f"{tmp_path} is not a kforge run folder (no run.json)" in r.stderr
    (tmp_path / "run.json").write_text("{}")
    r = kforge("report", tmp_path)
    assert r.exit_code == 2
    assert f"{tmp_path}: needs summary.json and history.json (resume the run to finish it first)" in r.stderr
