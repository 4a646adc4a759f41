"""bench/vs_kernel_tuner.py without a GPU: the temporary two-case manifest, the 10 kforge
candidates (compiled for sm_90, launches resolved), and the rows it writes when Kernel Tuner is
not installed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernel_forge.model.candidate import parse_candidate
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.model.task import load_task

from tests.support.bench_scripts import bench_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return bench_script("vs_kernel_tuner")


def test_the_manifest_has_exactly_the_two_cases_of_the_benchmark(bench, tmp_path):
    task = load_task(bench.two_case_manifest(tmp_path))
    assert [(c.name, c.role, c.vars["n"]) for c in task.cases] == [("odd", "correctness", 1_000_003),
                                                                  ("n16M", "performance", 1 << 24)]
    assert task.name == "vector_add" and task.reference.kind == "python"
    assert task.baselines and all(b.path.is_file() for b in task.baselines.values())


def test_the_ten_candidates_compile_cold_and_launch_one_thread_per_element(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    task = load_task(bench.two_case_manifest(tmp_path))
    gate = Gate(task, GateOptions(arch="sm_90"))
    try:
        assert len(bench.BLOCKS) == 10 and max(bench.BLOCKS) <= 1024 and len(set(bench.BLOCKS)) == 10
        for block in bench.BLOCKS:
            cand = parse_candidate(bench.KFORGE_KERNEL.format(block=block), name=f"b{block}.cu")
            _spec, compiled = gate.prepare(cand)
            assert compiled["cached"] is False, block    # a fresh cache: every candidate compiles
            for case in task.cases:
                grid, blk, _smem = cand.launch.resolve({**case.vars, **cand.compile_defines()})
                assert blk == (block, 1, 1) and grid[0] * block >= case.vars["n"] > (grid[0] - 1) * block
    finally:
        gate.close()
    assert gate._worker is None   # nothing above needed the GPU


def test_without_kernel_tuner_its_rows_say_why_and_the_json_is_written(bench, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "kernel_tuner", None)   # import kernel_tuner -> ImportError
    out = tmp_path / "vs.json"
    assert bench.main(["--only", "kernel_tuner", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["harness"] for r in report["rows"]] == ["Kernel Tuner (nvcuda)", "Kernel Tuner (cupy)"]
    assert all("not installed" in r["skipped"] for r in report["rows"])
    assert "skipped: kernel_tuner is not installed" in report["table"]


def test_the_table_prints_medians_and_best_times(bench):
    rows = [{"harness": "kforge full gate", "per_candidate_ms": {"median": 97.4, "first": 120.0, "max": 130.2},
             "best_us": 57.31, "best_block": 256},
            {"harness": "Kernel Tuner, cupy backend", "per_candidate_ms": {"median": 433.0}, "best_us": 82.0,
             "best_block": 512, "note": "some configurations failed"},
            {"harness": "Kernel Tuner, CUDA backend (nvcuda)", "lang": "nvcuda", "per_candidate_ms": {"median": 389.6},
             "best_us": 83.9, "best_block": 128}]
    text = bench.table(rows)
    assert "| kforge full gate | 97 | 120 | 130 | 4.0× | 57.3 µs | 256 |" in text
    assert "| Kernel Tuner, cupy backend | 433 | - | - | 0.9× | 82.0 µs | 512 |" in text
    assert "| Kernel Tuner, CUDA backend (nvcuda) | 390 | - | - | 1.0× | 83.9 µs | 128 |" in text
    assert "some configurations failed" in text


# -- bench/fetch_device_wheels.sh (no network here: its list, not its downloads) ---------------

def _wheel_specs() -> list[str]:
    import re

    text = (ROOT / "bench" / "fetch_device_wheels.sh").read_text()
    body = text[text.index("WHEELS=(") + len("WHEELS=("):]
    body = body[:body.index("\n)")]
    lines = [line.split("#", 1)[0] for line in body.splitlines()]
    return [tok for line in lines for tok in line.split() if re.match(r"^[A-Za-z0-9]", tok)]


def test_the_wheel_script_is_valid_bash():
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    proc = subprocess.run([bash, "-n", str(ROOT / "bench" / "fetch_device_wheels.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_wheel_list_pins_one_version_of_each_project_the_device_lacks():
    import re

    specs = _wheel_specs()
    assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.]*", s) for s in specs), specs
    names = [re.sub(r"[-_.]+", "_", s.split("==")[0].lower()) for s in specs]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    needed = {"jsonschema", "referencing", "rpds_py", "jsonschema_specifications", "anthropic", "openai",
              "jiter", "pydantic", "pydantic_core", "annotated_types", "typing_inspection", "sniffio",
              "cupti_python", "pyelftools", "mcp", "kernel_tuner", "python_constraint2", "xmltodict"}
    assert needed <= set(names), sorted(needed - set(names))
    assert "cupti_python==13.0.1" in {f"{n}=={s.split('==')[1]}" for n, s in zip(names, specs)}
    # the image has these; carrying them would put a second version beside the image's
    for on_image in ("attrs", "numpy", "scipy", "pandas", "scikit_learn", "click", "certifi", "nvidia_cuda_cupti"):
        assert on_image not in names, on_image


def test_the_stencil_case_searches_the_blurs_own_54_settings_with_no_templates_entry(bench, tmp_path):
    task = load_task(bench.stencil_manifest(tmp_path))
    assert task.templates == () and task.initial.name == "tuned.cu" and task.launch is None
    from kernel_forge.model.candidate import load_candidate
    cand = load_candidate(task.initial)
    assert len(cand.configurations()) == bench.STENCIL_SETTINGS == 54
    perf = [c for c in task.cases if c.role == "performance"]
    assert [(c.vars["h"], c.vars["w"]) for c in perf] == [(4096, 4096)]
    # Kernel Tuner's side covers the same settings: its restrictions and grid divisors agree
    import itertools
    kt = [dict(zip(("BX", "BY", "RY"), v)) for v in itertools.product([8, 16, 32, 64, 128], [1, 2, 4, 8, 16], [1, 2, 4])
          if 64 <= v[0] * v[1] <= 1024]
    assert sorted(map(lambda d: sorted(d.items()), kt)) == sorted(sorted(d.items()) for d in cand.configurations())
    for d in cand.configurations():
        grid, block, _ = cand.with_defines(d).launch.resolve({"h": 4096, "w": 4096, **d})
        assert grid[:2] == (-(-4096 // d["BX"]), -(-4096 // (d["BY"] * d["RY"]))) and block[:2] == (d["BX"], d["BY"])


def test_without_kernel_tuner_the_stencil_row_says_why(bench, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "kernel_tuner", None)
    out = tmp_path / "st.json"
    assert bench.main(["--case", "stencil", "--only", "kernel_tuner", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["rows"][0]["skipped"].startswith("kernel_tuner is not installed")
    assert report["benchmark"]["settings"] == 54 and "2x Kernel Tuner" in report["table"]


def test_the_stencils_clock_stops_when_the_progress_shows_its_own_54_settings_gated(bench):
    done = bench.own_space_done
    assert not done("[kforge]   search population: tuned.cu: 49 of 54 settings gated, 5 left; "
                    "bound_stencil2d.cu: 25 of 64 settings gated, 39 left")
    assert not done("[kforge]   search population: tuned.cu: 25 of 54 settings gated, 29 left; "
                    "gate:bound_stencil2d.cu: 1 of 1 settings gated")     # the bound pattern's, not the kernel's
    assert done("[kforge]   search population: tuned.cu: 54 of 54 settings gated; "
                "bound_stencil2d.cu: 49 of 64 settings gated, 15 left")
