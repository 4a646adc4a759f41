"""The offline search benchmark: the recorder (bench/search_record.py) through a scripted gate, and
the simulator (bench/search_sim.py) replaying what it wrote, in both modes."""
from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from kernel_forge.model.task import load_task

from tests.support.bench_scripts import bench_script
from tests.support.landscape_gate import OPT, LandscapeGate

ROOT = Path(__file__).resolve().parents[2]
search_record = bench_script("search_record")
search_sim = bench_script("search_sim")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "search-recording.json.gz"
    full = load_task(ROOT / "manifests" / "matmul_f32.json")
    # the two matmul templates of the landscape (the expert patterns' settings -- the warp-tiled
    # SIMT's 276, the split-TF32's 90 -- add only time)
    task = dataclasses.replace(full, templates=tuple(t for t in full.templates if t.name.startswith("matmul_f32_")))
    search_record.record([task], LandscapeGate, path, progress=lambda m: None)
    return path


def test_the_recorder_gates_every_valid_setting_of_every_template(recording):
    with gzip.open(recording, "rt") as f:
        rec = json.load(f)
    assert rec["format"] == search_sim_format() and rec["complete"] is True
    mm = rec["tasks"]["matmul_f32"]
    assert mm["performance"] == ["sq256", "rect", "large"]
    assert {k: (v["settings"], len(v["results"]), v["complete"]) for k, v in mm["templates"].items()} == \
        {"matmul_f32_regblock.cu": (68, 68, True), "matmul_f32_tiled.cu": (7, 7, True)}
    best = min(mm["templates"]["matmul_f32_regblock.cu"]["results"], key=lambda r: r["score_us"])
    assert best["defines"] == OPT and set(best["cases"]) == {"sq256", "rect", "large"}
    assert mm["initial"]["passed"] and mm["baselines"]["cublas"]["passed"]


def search_sim_format():
    return search_record.FORMAT


def test_a_recording_cut_by_its_time_limit_says_so(tmp_path):
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    said = []
    rec = search_record.record([task, task], LandscapeGate, tmp_path / "r.json.gz", time_limit=0.0, progress=said.append)
    assert rec["complete"] is False and "time limit: matmul_f32 not started" in said[0]


def test_a_task_the_recording_was_cut_before_is_left_out_of_the_simulation(recording, tmp_path):
    with gzip.open(recording, "rt") as f:
        rec = json.load(f)
    cut = json.loads(json.dumps(rec["tasks"]["matmul_f32"]))
    for t in cut["templates"].values():
        t["results"], t["complete"] = [], False
    rec["tasks"] = {"whole": rec["tasks"]["matmul_f32"], "matmul_f32": cut}
    rec["tasks"]["whole"]["manifest"] = cut["manifest"]
    path = tmp_path / "partial.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(rec, f)
    pools, _ = search_sim.load_recording([path])
    assert list(pools) == ["whole"] and pools["whole"].recorded == 75


def test_recordings_of_one_device_merge_each_task_from_the_one_that_holds_it(recording, tmp_path):
    """A recording cut by its time limit, then a second one of the tasks it did not reach (the H200
    recordings of s8 and s9): the simulation takes each task from the recording holding most of it."""
    with gzip.open(recording, "rt") as f:
        rec = json.load(f)
    cut = json.loads(json.dumps(rec))
    for t in cut["tasks"]["matmul_f32"]["templates"].values():
        t["results"], t["complete"] = t["results"][:3], False
    cut["complete"] = False
    paths = []
    for name, r in (("cut", cut), ("whole", rec)):
        paths.append(tmp_path / f"{name}.json.gz")
        with gzip.open(paths[-1], "wt") as f:
            json.dump(r, f)
    for order in (paths, paths[::-1]):
        pools, env = search_sim.load_recording(order)
        assert pools["matmul_f32"].recorded == 75 and pools["matmul_f32"].imputed == 0 and env["complete"] is True
    pools, env = search_sim.load_recording(paths[:1])
    assert pools["matmul_f32"].recorded == 6 and pools["matmul_f32"].imputed > 0 and env["complete"] is False
    other = json.loads(json.dumps(rec))
    rec["device"] = {"name": "NVIDIA H200", "sms": 132, "clock_offset": {"offset_us": 0.84}}
    other["device"] = dict(rec["device"], clock_offset={"offset_us": 0.91})     # measured again: the same device
    for name, r in (("whole", rec), ("again", other)):
        with gzip.open(tmp_path / f"{name}.json.gz", "wt") as f:
            json.dump(r, f)
    assert search_sim.load_recording([tmp_path / "whole.json.gz", tmp_path / "again.json.gz"])[0]
    other["device"] = {"name": "another GPU", "sms": 132}
    with gzip.open(tmp_path / "other.json.gz", "wt") as f:
        json.dump(other, f)
    with pytest.raises(SystemExit, match="different devices"):
        search_sim.load_recording([paths[0], tmp_path / "other.json.gz"])


def test_the_simulator_replays_the_recording_through_the_real_loop(recording, tmp_path):
    pools, env = search_sim.load_recording([recording])
    pool = pools["matmul_f32"]
    assert pool.recorded == 75 and pool.imputed == 0 and pool.best() == pytest.approx(50.0)
    env["device"], env["calibration"] = None, None
    rows = {s: search_sim.run_one(pool, env, "tune", s, 0, budget=48, workdir=tmp_path) for s in ("brute", "population")}
    for r in rows.values():
        assert r["proposals"] == 75 and r["stop"].startswith("proposer_exhausted") and r["curve"][-1] == pytest.approx(1.0)
    assert rows["population"]["reach"] < rows["brute"]["reach"]
    model = search_sim.run_one(pool, env, "model", "population", 1, budget=16, workdir=tmp_path)
    assert model["proposals"] >= 12 and model["curve"] and 0 <= model["duplicates"] <= model["proposals"]


def test_the_simulated_model_writes_settings_into_its_kernels(recording):
    pools, _ = search_sim.load_recording([recording])
    prop = search_sim.SimProposer(pools["matmul_f32"], 0)
    src = prop._source("matmul_f32_regblock.cu", OPT)
    assert search_sim.sim_kernel(src) == ("matmul_f32_regblock.cu", OPT)
    from kernel_forge.model.candidate import parse_candidate
    cand = parse_candidate(src, name="x.cu")
    gate = search_sim.SimGate(pools["matmul_f32"], None, None)
    ev = gate.evaluate(cand)
    assert ev.passed and ev.score_us == pytest.approx(50.0)


def test_the_table_names_every_strategy_and_the_plot_is_drawn(recording, tmp_path):
    pools, env = search_sim.load_recording([recording])
    pool = pools["matmul_f32"]
    results = {"source": str(recording), "complete": True, "seeds": 2, "within": 0.05, "rows": [],
               "tasks": {"matmul_f32": {"settings": 75, "recorded": 75, "imputed": 0, "pool_best_us": 50.0,
                                         "initial_us": 600.0, "modes": {"tune": {}}}}}
    for s in ("greedy", "population"):
        rows = [search_sim.run_one(pool, env, "tune", s, seed, budget=48, workdir=tmp_path) for seed in range(2)]
        results["rows"] += rows
        results["tasks"]["matmul_f32"]["modes"]["tune"][s] = search_sim.summarise(rows, [12, 24, 48], 75)
    search_sim.write_outputs(results, tmp_path / "out")
    table = (tmp_path / "out" / "SEARCH.md").read_text()
    assert "| matmul_f32 | 75 (0) | greedy |" in table and "| matmul_f32 | 75 (0) | population |" in table
    assert (tmp_path / "out" / "search-sim.png").read_bytes()[:4] == b"\x89PNG"
