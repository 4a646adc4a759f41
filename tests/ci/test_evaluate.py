"""``kforge eval``'s checks before the GPU, and the gate settings check the CI gate's three entry
points share (eval, ``kforge gate``, ``kforge replay``): a setting out of its bounds or a bad timing
environment variable is refused by name before any gate is made."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_forge.ci.evaluate import check_gate_settings, run_eval
from kernel_forge.ci.regression import run_regression
from kernel_forge.common.errors import InputError
from kernel_forge.config.gate_settings import GateOptions

ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = ROOT / "manifests" / "vector_add.json"


def no_gate(task, options):
    pytest.fail("a gate was made although a setting was refused")


def test_the_gate_settings_are_checked_against_their_bounds_and_the_timing_environment(monkeypatch):
    monkeypatch.delenv("KFORGE_CLOCK", raising=False)
    monkeypatch.delenv("KFORGE_CLOCK_OFFSET_US", raising=False)
    check_gate_settings(GateOptions())
    with pytest.raises(InputError, match="--max-noise"):
        check_gate_settings(GateOptions(max_noise=float("nan")))
    monkeypatch.setenv("KFORGE_CLOCK", "sundial")
    with pytest.raises(InputError, match="KFORGE_CLOCK='sundial'"):
        check_gate_settings(GateOptions())


def test_eval_refuses_a_bad_timing_environment_before_it_makes_a_gate(monkeypatch):
    monkeypatch.setenv("KFORGE_CLOCK_OFFSET_US", "fast")
    with pytest.raises(InputError, match="KFORGE_CLOCK_OFFSET_US='fast'"):
        run_eval(VECTOR_ADD, None, GateOptions(), gate_factory=no_gate)


def test_the_ci_gate_refuses_a_bad_timing_environment_before_it_makes_a_gate(monkeypatch, tmp_path):
    approvals = tmp_path / "approved.json"
    approvals.write_text(json.dumps({"approved": [
        {"task": "vector_add", "manifest": str(VECTOR_ADD), "kernel": str(ROOT / "manifests" / "vector_add.cu"),
         "speedup_vs_initial": 1.0, "tolerance": 0.1, "sha256": "0" * 64}]}))
    monkeypatch.setenv("KFORGE_CLOCK", "sundial")
    with pytest.raises(InputError, match="KFORGE_CLOCK='sundial'"):
        run_regression(approvals, GateOptions(), gate_factory=no_gate)
