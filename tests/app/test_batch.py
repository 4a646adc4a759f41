"""`kforge batch`: many tasks, one after another or as Ray tasks, with fake gates (no GPU)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kernel_forge.app.batch import run_batch, table
from kernel_forge.common.errors import EnvironmentProblem, InputError

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = [str(ROOT / "manifests" / f"{n}.json") for n in ("vector_add", "reduce_sum", "transpose")]
LOOP = {"max_iterations": 2, "tune_budget": 3, "retime_rounds": 1}


@pytest.mark.slow
def test_a_batch_without_ray_runs_every_task_into_its_own_run_folder(tmp_path):
    rec = run_batch(MANIFESTS, runs_dir=tmp_path, loop=LOOP, gate_factory="tests.support.batch_fakes:scripted")
    batch = tmp_path / rec["batch"]
    assert set(rec["results"]) == {"vector_add", "reduce_sum", "transpose"}
    for name, r in rec["results"].items():
        assert r["stop_reason"] in ("max_iterations", "proposer_exhausted") or r["stop_reason"].startswith("proposer_exhausted")
        run = Path(r["run"])
        assert run.parent == batch / name and (run / "summary.json").is_file()
    on_disk = json.loads((batch / "batch.json").read_text())
    assert on_disk["results"].keys() == rec["results"].keys() and on_disk["finished"]
    assert "| vector_add |" in table(rec)


def test_a_finished_batch_resumes_without_running_anything_again(tmp_path):
    rec = run_batch(MANIFESTS[:1], runs_dir=tmp_path, loop=LOOP, gate_factory="tests.support.batch_fakes:scripted")
    batch = tmp_path / rec["batch"]
    runs_before = sorted(p.name for p in (batch / "vector_add").iterdir())
    again = run_batch([], resume=batch, gate_factory="tests.support.batch_fakes:scripted")
    assert again["results"]["vector_add"]["run"] == rec["results"]["vector_add"]["run"]
    assert sorted(p.name for p in (batch / "vector_add").iterdir()) == runs_before


def test_the_same_task_twice_is_refused(tmp_path):
    with pytest.raises(InputError, match="once"):
        run_batch([MANIFESTS[0], MANIFESTS[0]], runs_dir=tmp_path)


def test_ray_missing_says_how_to_install_it(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(EnvironmentProblem, match=r"\[ray\]"):
        run_batch(MANIFESTS[:1], runs_dir=tmp_path, ray_address="local",
                  gate_factory="tests.support.batch_fakes:scripted")


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}   # tests.support.batch_fakes
    yield ray, {"num_cpus": 2, "num_gpus": 2, "runtime_env": {"env_vars": env}, "logging_level": "ERROR",
                "log_to_driver": False}
    ray.shutdown()


@pytest.mark.slow
def test_ray_runs_each_task_as_a_one_gpu_ray_task_and_a_killed_task_resumes(tmp_path, ray_local, monkeypatch):
    ray, init = ray_local
    marker = tmp_path / "died"
    init = dict(init)
    init["runtime_env"] = {"env_vars": dict(init["runtime_env"]["env_vars"], KFORGE_TEST_DIE_TASK="reduce_sum",
                                            KFORGE_TEST_DIE_MARKER=str(marker))}
    rec = run_batch(MANIFESTS, runs_dir=tmp_path / "runs", loop=LOOP, ray_address="local", retries=2,
                    gate_factory="tests.support.batch_fakes:dies_once", ray_init=init)
    assert marker.read_text() == "died"                      # the reduce_sum task's process was killed once
    for name, r in rec["results"].items():
        assert "error" not in r, r
        assert (Path(r["run"]) / "summary.json").is_file()
    assert rec["results"]["reduce_sum"]["resumed"] is True   # the retry resumed the killed run
    assert rec["results"]["vector_add"]["resumed"] is False
    hist = json.loads((Path(rec["results"]["reduce_sum"]["run"]) / "history.json").read_text())
    assert len(hist["attempts"]) >= 2
