"""How a run is put together: the archive feeds the next run (examples, settings gated first), the
prompts are written, and several GPUs gate an iteration in parallel with the same decisions."""
from __future__ import annotations

import json
import time
from pathlib import Path

from kernel_forge.evidence.run_dir import validate_file
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.pool import GatePool
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import start_run
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate, vector_add, write_proposals

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"


def tuner_run(tmp_path: Path, archive: Path, name: str):
    task = load_task(MANIFEST)
    opt = start_run(MANIFEST, LoopConfig(max_iterations=3, tune_budget=3, archive=str(archive), retime_rounds=1),
                    GateOptions(), ProposerConfig(), runs_dir=tmp_path / name, gate=ScriptedGate(task))
    opt.run()
    return opt


def read(opt, name):
    return json.loads((opt.run_dir.path / name).read_text())


def test_a_second_run_takes_the_first_runs_best_settings_and_gates_them_first(tmp_path):
    db = tmp_path / "team.sqlite"
    first = tuner_run(tmp_path, db, "a")
    assert db.is_file()                                        # the run archived itself at its end
    best1 = read(first, "summary.json")["best"]
    second = tuner_run(tmp_path, db, "b")
    got = read(second, "retrieval.json")
    validate_file(second.run_dir.path / "retrieval.json")
    assert got["examples"] and got["examples"][0]["same_task"] is True
    assert got["settings"], "the first run's tuned settings were archived"
    hist1, hist2 = read(first, "history.json"), read(second, "history.json")
    for label, items in got["settings"].items():
        mine = [a for a in hist1["attempts"] if a["label"] == label and a["status"] == "passed"]
        fastest = min(a["score_us"] for a in mine)
        warm = items[0]
        assert warm["score_us"] == fastest and any(a["defines"] == warm["defines"] for a in mine)
        tuned = [a for a in hist2["attempts"] if a["label"] == label]
        assert tuned[0]["defines"] == warm["defines"]        # gated first, before the search's own choice
        assert "archived setting" in tuned[0]["rationale"] and warm["attempt"] in tuned[0]["rationale"]
    assert best1["id"]
    second.proposer.needs_prompt = True   # the tuner asks nothing; build what a model would be asked next
    prompt = second._prompt()
    assert "# Kernels from the archive" in prompt and "From an earlier run of this task" in prompt


def test_without_the_archive_only_the_expert_pattern_is_offered_and_nothing_is_recorded(tmp_path):
    task = load_task(MANIFEST)
    opt = start_run(MANIFEST, LoopConfig(max_iterations=1, tune_budget=2, archive="off"), GateOptions(),
                    ProposerConfig(), runs_dir=tmp_path / "runs", gate=ScriptedGate(task))
    opt.run()
    got = read(opt, "retrieval.json")
    assert [e["pattern"] for e in got["examples"]] == ["elementwise_vec"]       # shipped, not archived
    assert got["kind"]["kind"] == "elementwise" and got["archive"] is None
    assert not list(tmp_path.rglob("*.sqlite"))
    opt = start_run(MANIFEST, LoopConfig(max_iterations=1, tune_budget=2, archive="off", archive_examples=0),
                    GateOptions(), ProposerConfig(), runs_dir=tmp_path / "runs", gate=ScriptedGate(task))
    opt.run()
    assert read(opt, "retrieval.json")["examples"] == []                         # no examples asked for: none


def test_every_iteration_of_a_prompted_run_writes_its_prompt(tmp_path):
    task = load_task(MANIFEST)
    props = write_proposals(tmp_path / "props", [vector_add("pass 500"), vector_add("pass 450")])
    opt = start_run(MANIFEST, LoopConfig(max_iterations=5, archive="off", candidates=1), GateOptions(),
                    ProposerConfig(replay=str(props)), runs_dir=tmp_path / "runs", gate=ScriptedGate(task))
    opt.run()
    prompts = sorted(p.name for p in opt.run_dir.path.glob("prompt-*.md"))
    assert prompts == ["prompt-001.md", "prompt-002.md"]
    text = (opt.run_dir.path / "prompt-002.md").read_text()
    assert task.signature.text in text and "# Current best" in text


def run_with(gate, tmp_path: Path, name: str, task):
    props = write_proposals(tmp_path / "props", {
        "01.cu": vector_add("pass 520"), "02.cu": vector_add("pass 410"), "03.cu": vector_add("mismatch 300"),
        "04.cu": vector_add("pass 480"), "05.cu": vector_add("pass 700"), "06.cu": vector_add("pass 430")})
    opt = start_run(MANIFEST, LoopConfig(max_iterations=2, candidates=3, archive="off", retime_rounds=1),
                    GateOptions(), ProposerConfig(replay=str(props)), runs_dir=tmp_path / name, gate=gate)
    opt.run()
    return opt


class BusyGate(ScriptedGate):
    """A scripted gate that takes 20 ms a candidate, as a GPU does: with instant verdicts the first
    GPU's thread could take the whole queue before the second one started."""

    def evaluate(self, candidate, **kw):
        time.sleep(0.02)
        return super().evaluate(candidate, **kw)


def test_two_gpus_gate_an_iteration_in_parallel_and_choose_the_same_best(tmp_path):
    task = load_task(MANIFEST)
    one = run_with(ScriptedGate(task), tmp_path, "one", task)
    gates = [BusyGate(task), BusyGate(task)]
    two = run_with(GatePool(gates, [0, 1]), tmp_path, "two", task)
    h1, h2 = read(one, "history.json"), read(two, "history.json")
    assert [(a["id"], a["status"], a["reason"]) for a in h1["attempts"]] == \
           [(a["id"], a["status"], a["reason"]) for a in h2["attempts"]]
    assert read(one, "summary.json")["best"]["id"] == read(two, "summary.json")["best"]["id"] == "a0002"
    devices = {a["evaluation"]["device"] for a in h2["attempts"][1:] if a.get("evaluation")}
    assert devices == {0, 1}                                    # both GPUs gated candidates
    # every comparison ran on the first GPU only
    assert not [c for c in gates[1].calls if c[0] in ("retime", "baseline")]
    assert [c for c in gates[0].calls if c[0] == "retime"]
    for f in ("history.json", "summary.json", "run.json"):
        validate_file(two.run_dir.path / f)
