"""The child run under compute-sanitizer (gpu/sanitize_child.py), on the NumPy stand-in for CuPy and
the driver of tests/support/fake_gpu.py: no GPU."""
from __future__ import annotations

import json
import sys

import pytest

import kernel_forge.gpu.case_inputs as case_inputs_mod
import kernel_forge.gpu.nvrtc as nvrtc_mod
from kernel_forge.gpu import driver, sanitize_child

from tests.support import fake_gpu
from tests.support.in_process_gate import CAND, honest, kernel_fn, vector_add_task


@pytest.fixture
def task(tmp_path):
    return vector_add_task(tmp_path)


def test_the_child_runs_the_gates_cubin_once_through_the_worker_path_and_compiles_nothing(task, tmp_path,
                                                                                           monkeypatch):
    cubin = nvrtc_mod.compile_source(CAND.source, arch="sm_90", defines=CAND.compile_defines()).cubin
    fake_gpu.install(monkeypatch)
    kernel_fn(honest)
    allocators, loaded, seen = [], [], []
    monkeypatch.setattr(sys.modules["cupy"].cuda, "set_allocator", allocators.append, raising=False)
    monkeypatch.setattr(nvrtc_mod, "compile_source", lambda *a, **k: pytest.fail("the child compiled"))
    module = driver.Module
    monkeypatch.setattr(driver, "Module", lambda cubin, entry: loaded.append((cubin, entry)) or module(cubin, entry))
    block = case_inputs_mod.Block
    monkeypatch.setattr(case_inputs_mod, "Block",
                        lambda size, separate=False: seen.append(separate) or block(size, separate=separate))
    (tmp_path / "candidate.cubin").write_bytes(cubin)
    job = {"manifest": str(task.path), "cubin": str(tmp_path / "candidate.cubin"), "entry": "vector_add",
           "label": "k.cu", "launch": {"grid": [4, 1, 1], "block": [256, 1, 1], "shared_mem": 0},
           "case": "odd", "seed": 7}
    (tmp_path / "job.json").write_text(json.dumps(job))

    assert sanitize_child.main(str(tmp_path / "job.json")) == 0
    assert allocators == [None]                       # no pool to hide an out-of-bounds access in
    assert loaded == [(cubin, "vector_add")]
    assert seen == [True]                             # every buffer an allocation of its own
    assert fake_gpu.LAUNCHES == [((4, 1, 1), (256, 1, 1))]   # one checked launch, with the launch given
