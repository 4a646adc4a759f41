"""The include allow-list in the real gate (issue #35 S1/S2), on a GPU: a refused include is a
``compile_error`` verdict naming the line and the file, with no trace of the file's words in
the evaluation; a header the manifest names compiles, runs and passes."""
from __future__ import annotations

import json
import shutil

import pytest

from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import load_task

from tests.support.paths import ROOT

pytestmark = pytest.mark.gpu

SECRET = "TOPSECRET_gate_5b0e"
HEAD = "// kforge: grid = [cdiv(n, 256)]\n// kforge: block = [256]\n"
BODY = ('extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {\n'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) c[i] = add(a[i], b[i]);\n"
        "}\n")


@pytest.fixture
def task_with_header(tmp_path, monkeypatch):
    folder = tmp_path / "task"
    folder.mkdir()
    shutil.copy(ROOT / "references" / "vector_add.py", folder / "vector_add.py")
    shutil.copy(ROOT / "manifests" / "vector_add.cu", folder / "vector_add.cu")
    (folder / "ops.cuh").write_text("__device__ __forceinline__ float add(float x, float y) { return x + y; }\n")
    data = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    data.update(reference={"python": "vector_add.py:reference"}, baselines={}, headers=["ops.cuh"])
    data.pop("templates", None)
    (folder / "vector_add.json").write_text(json.dumps(data))
    (tmp_path / ".env").write_text(SECRET + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    return load_task(folder / "vector_add.json")


def test_a_manifest_named_header_compiles_runs_and_passes_in_the_gate(task_with_header):
    cand = parse_candidate(HEAD + '#include "ops.cuh"\n' + BODY, name="with_header.cu")
    with Gate(task_with_header, GateOptions.quick(warmup=1, reps=5)) as gate:
        ev = gate.evaluate(cand)
    assert ev.passed, ev.message


def test_a_digraph_include_of_dot_env_is_a_compile_error_verdict_without_its_words(task_with_header, tmp_path):
    cand = parse_candidate(HEAD + '__device__ int leak[] = {\n%:include ".env"\n};\n'
                           '__device__ __forceinline__ float add(float x, float y) { return x + y; }\n' + BODY,
                           name="leak.cu")
    with Gate(task_with_header, GateOptions.quick(warmup=1, reps=5)) as gate:
        ev = gate.evaluate(cand)
    assert not ev.passed and ev.reason == "compile_error"
    assert "line 4" in ev.message and str(tmp_path / ".env") in ev.message
    assert SECRET not in json.dumps(ev.to_json())
