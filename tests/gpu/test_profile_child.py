"""Tests of kernel_forge/gpu/profile_child.py, on tests/fake_gpu.py's stand-in and on a GPU."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import fake_gpu
from kernel_forge.gpu import profile_child

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"        # cases tiny (n 37), odd (n 1,000,003), ...
SOURCE = (ROOT / "manifests" / "vector_add.cu").read_text()


def write_spec(tmp_path: Path, **over) -> Path:
    spec = {"manifest": str(MANIFEST), "source": SOURCE, "arch": "sm_90", "cases": ["tiny"], "seed": 3,
            "launches": 2, "status": str(tmp_path / "status.json"), **over}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return tmp_path / "spec.json"


@pytest.fixture
def fake(monkeypatch):
    fake_gpu.install(monkeypatch)
    cp = sys.modules["cupy"]
    monkeypatch.setattr(cp, "copyto", lambda dst, src: dst.a.__setitem__(Ellipsis, src.a), raising=False)
    seen = []

    def kernel(values, module):
        a_ptr, b_ptr, c_ptr, n = values
        a, b, c = fake_gpu.floats(a_ptr, n), fake_gpu.floats(b_ptr, n), fake_gpu.floats(c_ptr, n)
        c[:] = a + b
        seen.append((module.entry, n, c.copy()))
    fake_gpu.KERNEL["run"] = kernel
    return seen


def test_each_case_is_launched_as_often_as_asked_on_the_gate_s_inputs_and_the_plan_is_written(fake, tmp_path, capsys):
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.task import load_task

    spec = write_spec(tmp_path, cases=["tiny", "tiny"], launches=3)
    assert profile_child.main(["profile_child", str(spec)]) == 0
    status = json.loads((tmp_path / "status.json").read_text())
    assert status == {"error": None, "plan": [{"case": "tiny", "launches": 3, "grid": [1, 1, 1], "block": [256, 1, 1],
                                               "shared_mem": 0}] * 2}          # cdiv(37, 256) blocks of 256
    assert len(fake_gpu.LAUNCHES) == 6 and {e for e, _, _ in fake} == {"vector_add"}
    task = load_task(MANIFEST)
    host = generate(task, task.case("tiny"), 3)                                  # the gate's first draw, seed 3
    assert all(n == 37 and np.array_equal(c, host.buffers["a"] + host.buffers["b"]) for _, n, c in fake)
    assert capsys.readouterr().out == ""                                         # stdout is ncu's


def test_the_launch_given_and_its_defines_replace_the_manifest_s(fake, tmp_path):
    spec = write_spec(tmp_path, launch={"grid": ["cdiv(n, B)"], "block": ["B"]}, defines={"B": 32}, launches=0)
    assert profile_child.main(["profile_child", str(spec)]) == 0
    (plan,) = json.loads((tmp_path / "status.json").read_text())["plan"]
    assert (plan["grid"], plan["block"], plan["launches"]) == ([2, 1, 1], [32, 1, 1], 1)     # at least one launch


def test_an_error_is_written_to_the_status_file_and_the_exit_status_is_1(fake, tmp_path):
    spec = write_spec(tmp_path, cases=["tiny", "no_such_case"])
    assert profile_child.main(["profile_child", str(spec)]) == 1
    status = json.loads((tmp_path / "status.json").read_text())
    assert [p["case"] for p in status["plan"]] == ["tiny"]                      # what it did before the error
    assert status["error"] == "KeyError: 'no_such_case'"
    bad = write_spec(tmp_path, source=SOURCE.replace("c[i] = a[i] + b[i];", "c[i] = a[i] +;"))
    assert profile_child.main(["profile_child", str(bad)]) == 1
    assert json.loads((tmp_path / "status.json").read_text())["error"].startswith("CompileError: ")


@pytest.mark.gpu
def test_the_child_runs_as_a_module_on_a_gpu(tmp_path):
    spec = write_spec(tmp_path, cases=["tiny", "odd"], launches=2)
    p = subprocess.run([sys.executable, "-m", "kernel_forge.gpu.profile_child", str(spec)], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout == ""
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["error"] is None
    assert [(s["case"], s["launches"], s["grid"]) for s in status["plan"]] == [("tiny", 2, [1, 1, 1]),
                                                                               ("odd", 2, [3907, 1, 1])]
