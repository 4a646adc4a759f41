"""``kforge replay`` judges the recorded claim against the noise measured with it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.ci import evaluate
from kernel_forge.app.cli import cli
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import start_run
from kernel_forge.ci.replay_check import FLOOR, judge
from kernel_forge.common.stats import summarize
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate, vector_add, write_proposals

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"


def timing(median: float, half_band: float):
    """31 samples spread evenly around ``median``, their p20-p80 half-width ``half_band``."""
    # linear spread over [-1, 1]: p20..p80 is +-0.6 of the spread
    spread = half_band / 0.6
    return summarize([median + spread * (k - 15) / 15 for k in range(31)])


@pytest.mark.parametrize("now, recorded_band, holds", [
    (10.05, (10.0, 10.2), True),       # within the bands
    (10.42, (10.05, 10.17), False),    # the sq256: +3.1 %, bands ±0.06 and ±0.1
    (10.25, (9.8, 10.4), True),        # a wide recorded band takes +1.4 %
    (9.0, (10.0, 10.2), True),         # faster than claimed: the claim holds
    (10.10, None, True),               # band unknown: the floor (1 %) still allows it
    (10.30, None, False),
])
def test_judge(now, recorded_band, holds):
    v = judge(10.11, recorded_band, timing(now, 0.1 if now != 10.42 else 0.06))
    assert v.holds is holds, v.detail
    assert v.allowed_us >= FLOOR * 10.11
    assert ("does NOT hold" in v.detail) == (not holds)
    j = v.to_json()
    assert j["delta_pct"] == pytest.approx(100 * (j["now_us"] - 10.11) / 10.11)


def test_nothing_to_judge_on_a_correctness_case():
    v = judge(None, None, None)
    assert v.holds is None and "no recorded time" in v.detail


class SlowerGate(ScriptedGate):
    """Everything 5 % slower than scripted, as a GPU that throttles would measure."""

    def time_us(self, cand):
        return super().time_us(cand) * 1.05


@pytest.fixture
def finished(tmp_path):
    props = write_proposals(tmp_path / "props", [vector_add("pass 400")])
    opt = start_run(MANIFEST, LoopConfig(max_iterations=2), GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=tmp_path / "runs", gate=ScriptedGate(load_task(MANIFEST)))
    opt.run()
    return opt.run_dir.path


def _kforge(monkeypatch, gate_cls):
    monkeypatch.setattr(evaluate, "default_gate", lambda task, options: gate_cls(task))
    runner = CliRunner()
    return lambda *a: runner.invoke(cli, [str(x) for x in a], catch_exceptions=False)


def test_replay_says_the_claim_holds_and_exits_0(finished, monkeypatch, tmp_path):
    kforge = _kforge(monkeypatch, ScriptedGate)
    r = kforge("replay", finished / "best-case-n16M.json", "--json", tmp_path / "r.json")
    assert r.exit_code == 0, r.output
    assert "claim: holds: now 200.00 µs vs recorded 200.00 µs (+0.0 %), within the noise band ±2.00 µs" in r.output
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["ok"] and result["claim"]["holds"] is True and result["claim"]["recorded_band_us"] is not None


def test_replay_says_the_claim_does_not_hold_and_exits_1(finished, monkeypatch):
    kforge = _kforge(monkeypatch, SlowerGate)
    r = kforge("replay", finished / "best-case-n16M.json", "--json", "-")
    assert r.exit_code == 1, r.output
    result = json.loads(r.stdout)
    assert result["passed"] is True and result["ok"] is False
    claim = result["claim"]
    assert claim["holds"] is False and claim["delta_pct"] == pytest.approx(5.0, abs=0.01)
    assert "does NOT hold" in claim["detail"]


def _task_in(folder: Path, cases=None) -> Path:
    """vector_add's manifest, kernel and reference copied into ``folder``/task (optionally other cases)."""
    (folder / "task").mkdir(parents=True)
    for src, name in ((ROOT / "manifests" / "vector_add.cu", "vector_add.cu"),
                      (ROOT / "references" / "vector_add.py", "vector_add.py")):
        (folder / "task" / name).write_text(src.read_text())
    data = json.loads(MANIFEST.read_text())
    for key in ("$schema", "templates"):
        data.pop(key, None)
    data.update(reference={"python": "vector_add.py:reference"}, baselines={})
    if cases is not None:
        data["cases"] = cases
    (folder / "task" / "vector_add.json").write_text(json.dumps(data))
    return folder / "task" / "vector_add.json"


def test_a_request_replays_its_own_manifest_from_any_folder(tmp_path, monkeypatch):
    """Issue 35: a request kept the manifest path as typed (relative to where the run started);
    from another folder replay failed, or used another manifest at the same relative path. It
    records the absolute path and the sha256 of the manifest and best.cu now."""
    first, other = tmp_path / "first", tmp_path / "other"
    _task_in(first)
    data = json.loads(MANIFEST.read_text())
    # another task at the same relative path, without the recorded case
    _task_in(other, cases=[c for c in data["cases"] if c["name"] != "n16M"])
    monkeypatch.chdir(first)
    props = write_proposals(tmp_path / "props", [vector_add("pass 400")])
    relative = Path("task/vector_add.json")
    opt = start_run(relative, LoopConfig(max_iterations=2), GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=tmp_path / "runs", gate=ScriptedGate(load_task(relative)))
    opt.run()
    request = opt.run_dir.path / "best-case-n16M.json"
    req = json.loads(request.read_text())
    assert req["manifest"] == str(first / "task" / "vector_add.json")
    assert len(req["manifest_sha256"]) == 64 and len(req["kernel_sha256"]) == 64
    monkeypatch.chdir(other)
    r = _kforge(monkeypatch, ScriptedGate)("replay", request, "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["claim"]["holds"] is True
