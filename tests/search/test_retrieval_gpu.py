"""Archive and retrieval on a GPU: real runs through the real gate are archived with their
device, and the next run is shown the first run's best and gates its setting first."""
from __future__ import annotations

import json

import pytest

from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import start_run
from kernel_forge.archive.harvest import archive_run
from kernel_forge.archive.store import integrity, list_entries, open_archive
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.model.task import load_task
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.search.retrieval import best_settings, retrieve

from tests.support.archive_fakes import history
from tests.support.gpu_probe import gpu_present  # noqa: F401  (used by skipif strings)
from tests.support.paths import MANIFESTS


@pytest.mark.gpu
@pytest.mark.skipif("not gpu_present()", reason="needs an NVIDIA GPU")
def test_gpu_a_real_run_is_archived_with_its_device_and_retrieved(tmp_path):
    """The tuner on vector_add through the real gate: every passing kernel goes in with the real
    GPU, driver and NVRTC, and the run's best is what retrieval and the warm start give next."""
    from kernel_forge.gate.gate import Gate

    manifest = MANIFESTS / "vector_add.json"
    task = load_task(manifest)
    opts = GateOptions.quick(reps=20, warmup=3)
    gate = Gate(task, opts)
    try:
        gate.ensure_gpu()
        # roof_stop=0: the initial vector_add is at ~94 % of the copy bandwidth on an H100/H200, and
        # the default (0.9) ends the run before the tuner proposes anything, so nothing but the
        # initial kernel (never retrieved) would be archived
        opt = start_run(manifest, LoopConfig(max_iterations=1, tune_budget=4, roof_stop=0), opts, ProposerConfig(),
                        runs_dir=tmp_path / "runs", gate=gate)
        opt.run()
    finally:
        gate.close()
    env = json.loads((opt.run_dir.path / "env.json").read_text())
    with open_archive(tmp_path / "a.sqlite") as a:
        rep = archive_run(opt.run_dir.path, a, task=task)
        hist = history(opt)
        assert any(x["proposer"] == "tune" and x["status"] == "passed" for x in hist["attempts"])
        assert rep.added == sum(x["status"] == "passed" and (x.get("holdout") or {}).get("passed", True)
                                for x in hist["attempts"])
        e = list_entries(a)[0]
        assert (e.gpu_name, e.driver, e.nvrtc) == (env["device"]["name"], env["device"]["driver_version"],
                                                 str(env["nvrtc"] or ""))
        best = json.loads((opt.run_dir.path / "summary.json").read_text())["best"]
        got = retrieve(a, task, gpu=env["device"]["name"])
        if best["proposer"] != "initial":
            assert got[0].same_task and got[0].attempt == best["id"]
            settings = best_settings(a, task, env["device"]["name"], label=best["label"])
            assert settings[0]["defines"] == best["defines"]
        assert integrity(a) == []


@pytest.mark.gpu
@pytest.mark.skipif("not gpu_present()", reason="needs an NVIDIA GPU")
def test_gpu_a_second_run_shows_the_first_runs_best_and_gates_its_setting_first(tmp_path):
    """Two tuner runs of vector_add through the real gate sharing one archive: the second's
    retrieval.json holds the first's best, its prompt shows it, and the archived setting of each
    template is the first of that template to be gated, with a rationale naming where it came from.
    (roof_stop=0, as above: else the first run archives only its initial kernel.)"""
    from kernel_forge.gate.gate import Gate

    manifest = MANIFESTS / "vector_add.json"
    task = load_task(manifest)
    db = tmp_path / "shared.sqlite"
    opts = GateOptions.quick(reps=20, warmup=3)
    runs = []
    lines: list[str] = []
    for name in ("first", "second"):
        gate = Gate(task, opts)
        try:
            gate.ensure_gpu()
            opt = start_run(manifest, LoopConfig(max_iterations=2, tune_budget=3, archive=str(db), roof_stop=0), opts,
                            ProposerConfig(), runs_dir=tmp_path / name, gate=gate, progress=lines.append)
            opt.run()
            opt.proposer.needs_prompt = True   # the tuner asks nothing; build what a model would be asked next
            prompt = opt._prompt()
        finally:
            gate.close()
        runs.append((opt, prompt))
    (first, _), (second, prompt) = runs
    got = json.loads((second.run_dir.path / "retrieval.json").read_text())
    first_attempts = [(a["id"], a["label"], a["status"], a.get("reason")) for a in history(first)["attempts"]]
    said = [x for x in lines if "archive" in x or "warning" in x]
    assert got["examples"] and got["examples"][0]["same_task"], (said, first_attempts, got["examples"][:1])
    assert "# Kernels from the archive" in prompt and "From an earlier run of this task" in prompt
    hist = history(second)
    for label, items in got["settings"].items():
        tuned = [a for a in hist["attempts"] if a["label"] == label]
        assert tuned[0]["defines"] == items[0]["defines"] and "archived setting" in tuned[0]["rationale"]
    assert got["settings"], "the first run archived its tuned settings"
