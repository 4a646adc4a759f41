"""kernel_forge.archive.harvest: the passing kernels of a run folder as archive entries, and
nothing that failed; on a machine without a GPU (the scripted gate of tests/support/fakes.py)."""
from __future__ import annotations

import json

import pytest

from kernel_forge.archive.format import content_hash
from kernel_forge.archive.harvest import archive_run, entries_from_run, record_run
from kernel_forge.archive.store import integrity, list_entries
from kernel_forge.app.run_setup import resume_run
from kernel_forge.common.errors import InputError
from kernel_forge.model.task import load_task

from tests.support.archive_fakes import TUNED_HEADER, by_label, history, run_task
from tests.support.fakes import ScriptedGate, vector_add
from tests.support.paths import MANIFESTS


def test_archive_run_keeps_every_passing_attempt_and_nothing_that_failed(tmp_path, arch):
    props = {"01_wrong.cu": vector_add("mismatch 300"), "02_fast.cu": vector_add("pass 400"),
             "03_overfit.cu": vector_add("pass 300", holdout="fail"), "04_broken.cu": vector_add("compile_error 0"),
             "05_slow.cu": vector_add("pass 700"), "06_tuned.cu": vector_add("pass 450", header=TUNED_HEADER)}
    opt = run_task(tmp_path, "vector_add", props)
    hist = history(opt)
    groups = by_label(hist)
    assert groups["03_overfit.cu"][0]["reason"] == "holdout_failed"        # the scripted verdicts happened
    passing = {a["id"] for a in hist["attempts"] if a["status"] == "passed" and not a["reason"] == "holdout_failed"}
    assert passing == {"a0000", groups["02_fast.cu"][0]["id"], groups["05_slow.cu"][0]["id"]} | \
        {a["id"] for a in groups["06_tuned.cu"]}

    rep = archive_run(opt.run_dir.path, arch, task=opt.task)
    assert rep.added == len(passing) == len(arch) and rep.present == 0
    assert rep.excluded == {"mismatch": 1, "holdout_failed": 1, "compile_error": 1}
    entries = {e.attempt: e for e in list_entries(arch)}
    assert set(entries) == passing

    run_json = json.loads((opt.run_dir.path / "run.json").read_text())
    env = json.loads((opt.run_dir.path / "env.json").read_text())
    fast = entries[groups["02_fast.cu"][0]["id"]]
    assert fast.task_name == "vector_add" and fast.task_hash == run_json["hashes"]["task"] == opt.task.hash()
    assert fast.task_description == opt.task.description and fast.task_signature == opt.task.signature.text
    assert fast.source == (opt.run_dir.path / groups["02_fast.cu"][0]["source_file"]).read_text()
    assert fast.content_hash == content_hash(fast.source, fast.launch, fast.defines)
    assert fast.score_us == pytest.approx(400) and fast.speedup_vs_initial == pytest.approx(1.5)
    assert fast.speedup_vs_baselines == {"cupy_add": pytest.approx(250 / 400)}
    assert [c["name"] for c in fast.cases] == ["n16M", "n64M"]
    assert fast.cases[0]["pct_peak_bw"] > 0 and fast.cases[0]["median_us"] == pytest.approx(200)
    assert {c["bound"] for c in fast.cases} <= {"memory", "compute", "latency", "unknown"}
    assert fast.diagnosis is not None and [c["name"] for c in fast.diagnosis["cases"]] == ["n16M", "n64M"]
    assert (fast.gpu_name, fast.gpu_arch, fast.driver) == (env["device"]["name"], "sm_90", "13.0")
    assert fast.nvrtc == str(env["nvrtc"] or "")
    assert fast.run == str(opt.run_dir.path.resolve())
    assert fast.holdout == "passed" and fast.proposer == "replay" and fast.label == "02_fast.cu"
    assert entries["a0000"].holdout == "passed"                 # the initial kernel ran its holdout cases
    assert entries[groups["05_slow.cu"][0]["id"]].holdout == "not_run"
    tuned = [entries[a["id"]] for a in groups["06_tuned.cu"]]
    assert sorted(e.defines["BLOCK"] for e in tuned) == [64, 128, 256, 512]
    assert all(e.launch == {"grid": ["cdiv(n, BLOCK)"], "block": ["BLOCK"], "shared_mem": 0} for e in tuned)
    assert integrity(arch) == []


def test_a_best_that_fails_the_final_holdout_stays_out(tmp_path, arch):
    opt = run_task(tmp_path, "vector_add", {"01_flaky.cu": vector_add("pass 300", holdout="flaky")})
    (flaky,) = by_label(history(opt))["01_flaky.cu"]
    assert flaky["best"] is True and flaky["holdout"] == {**flaky["holdout"], "passed": False, "final": True}
    rep = archive_run(opt.run_dir.path, arch)
    assert rep.excluded == {"holdout_failed": 1}
    assert [e.attempt for e in list_entries(arch)] == ["a0000"]


def test_archive_run_is_idempotent_and_takes_partial_runs(tmp_path, arch):
    task = load_task(MANIFESTS / "vector_add.json")
    props = [vector_add("pass 500"), vector_add("pass 450"), vector_add("pass 400")]
    # evaluations: the initial kernel, the first proposal, its holdout check; killed gating the second
    with pytest.raises(KeyboardInterrupt):
        run_task(tmp_path, "vector_add", props, gate=ScriptedGate(task, interrupt={"evaluate": 4}))
    (run,) = (tmp_path / "runs").iterdir()
    assert [a["status"] for a in json.loads((run / "history.json").read_text())["attempts"]] == \
        ["passed", "passed", "pending"]
    first = archive_run(run, arch)
    assert (first.added, first.present, first.excluded) == (2, 0, {"pending": 1})
    again = archive_run(run, arch)
    assert (again.added, again.present) == (0, 2)

    resume_run(run, gate=ScriptedGate(task)).run()
    done = archive_run(run, arch)
    assert (done.added, done.present, done.excluded) == (2, 2, {})
    assert sorted(e.score_us for e in list_entries(arch)) == pytest.approx([400, 450, 500, 600])
    assert integrity(arch) == []


def test_archive_run_without_the_task_loads_the_run_manifest(tmp_path, arch):
    opt = run_task(tmp_path, "vector_add", [vector_add("pass 400")])
    entries, excluded = entries_from_run(opt.run_dir.path)
    assert excluded == {} and len(entries) == 2
    assert all(e.diagnosis is not None for e in entries)       # the manifest still loads with the same hash


def test_a_folder_that_is_not_a_run_is_refused(tmp_path, arch):
    with pytest.raises(InputError, match=r"not a kforge run folder \(no run.json\)"):
        archive_run(tmp_path, arch)
    opt = run_task(tmp_path, "vector_add", [vector_add("pass 400")])
    (opt.run_dir.path / "history.json").write_text("{ damaged")
    with pytest.raises(InputError, match=r"history.json: damaged JSON"):
        archive_run(opt.run_dir.path, arch)
    assert len(arch) == 0


def test_record_run_never_raises_for_an_archive_problem(tmp_path):
    opt = run_task(tmp_path, "vector_add", [vector_add("pass 400")])
    bad = tmp_path / "not-an-archive.sqlite"
    bad.write_bytes(b"hello, world" * 10)
    lines: list[str] = []
    assert record_run(opt.run_dir.path, path=bad, progress=lines.append) is None
    assert "not archived" in lines[-1] and "not an SQLite database" in lines[-1]
    rep = record_run(opt.run_dir.path, path=tmp_path / "ok.sqlite", task=opt.task, progress=lines.append)
    assert rep.added == 2 and "2 kernel(s) added" in lines[-1]
