"""A task written by ``kforge init --describe`` from the recorded answers in tests/data/describe/,
shared by the tests of authoring's describe, cross-check and acceptance: the description, the
recorded folders (a good task, and one whose reference is off by one), and a NumPy stand-in for
the CUDA witness."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.authoring.crosscheck import OutputsWitness, run_crosscheck
from kernel_forge.authoring.from_description import describe_task
from kernel_forge.config.describe import DescribeConfig
from kernel_forge.model.task import load_task

from tests.support.host_witness import CXX
from tests.support.paths import TESTS

DATA = TESTS / "data" / "describe"
GOOD, WRONG = DATA / "relu_like", DATA / "relu_like_off_by_one"
DESCRIPTION = ("Leaky ReLU over n float32 values: y[i] = x[i] where x[i] > 0, else 0.01 * x[i]. "
               "n can be any size, including 1.")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler to build the witness for the host")


def recorded_text(folder: Path, role: str) -> str:
    """The answer text of the recorded call for ``role``."""
    for f in sorted(folder.glob("model-*.json")):
        rec = json.loads(f.read_text())
        if rec["role"] == role:
            return "\n".join(b["text"] for b in rec["response"]["content"] if b["type"] == "text")
    raise KeyError(role)


def numpy_witness(shift: int = 0):
    """A CUDA witness stand-in computed with NumPy (an OutputsWitness's run_kernel), optionally wrong."""
    def run(task, witness, case, inputs):
        x = inputs.buffers["x"].astype(np.float32)
        y = np.where(x > 0, x, np.float32(0.01) * x).astype(np.float32)
        if shift:
            y = np.roll(y, shift)
        return {"y": y}
    return OutputsWitness(run, name="numpy stand-in")


def described(tmp_path: Path, folder: Path = GOOD, **cfg) -> Path:
    """A task from recorded answers in tmp_path/task; returns its manifest."""
    return describe_task("relu_like", DESCRIPTION, tmp_path / "task", DescribeConfig(replay=str(folder), **cfg)).manifest


def record_disagreement(m: Path, runner) -> None:
    """Write the cross-check into the manifest's block as kforge before Step 14b did at init (a
    recorded disagreement is still honoured)."""
    data = json.loads(m.read_text())
    check = run_crosscheck(load_task(m), m.parent / "relu_like_witness.cu", runner, extra=0, seed=3)
    data["generated"]["crosscheck"] = check.block()
    m.write_text(json.dumps(data, indent=2))
