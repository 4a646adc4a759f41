"""kernel_forge/model/reference_process.py: Python references run in a child process, bounded in time."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.common.errors import ReferenceError_
from kernel_forge.model.inputs import generate
from kernel_forge.model.reference_process import ReferenceProcess, run_reference, sandbox_layers, sandboxed
from kernel_forge.model.task import CallableRef, Case, load_task

ROOT = Path(__file__).resolve().parents[2]
FIVE = Case("five", "correctness", {"n": 5}, 0)


def task_with(tmp_path: Path, body: str, **changes):
    """vector_add on one case of 5 values, its reference ``def reference(a, b, c, n):`` + ``body``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "ref.py"
    path.write_text("import os\nimport time\n\n\ndef reference(a, b, c, n):\n" + body)
    task = load_task(ROOT / "manifests" / "vector_add.json")
    return dataclasses.replace(task, cases=(FIVE,), reference=CallableRef("python", path, "reference", "ref.py:reference"),
                               **changes)


def test_the_reference_runs_in_a_child_that_stays_up_after_the_reference_fails(tmp_path):
    good = task_with(tmp_path / "good", "    c[...] = a + b\n    c[0] = os.getpid()\n")
    out = run_reference(good, "five", 3)
    want = generate(good, FIVE, 3).buffers
    np.testing.assert_array_equal(out["c"][1:], (want["a"] + want["b"])[1:])   # the child drew the same inputs
    child = int(out["c"][0])
    assert child != os.getpid()
    bad = task_with(tmp_path / "bad", "    raise ValueError('no such row')\n")
    with pytest.raises(ReferenceError_, match=r"^reference ref\.py:reference on case 'five' failed: ValueError: no such "
                                              r"row \(at .*ref\.py:6 in reference"):
        run_reference(bad, "five", 3)
    # the child stays up after the reference fails: one child of its own, so that no other test's thread
    # (an MCP server's run, a gate's reference prefetch) takes the pool's child in between
    own = ReferenceProcess(None)
    try:
        what = "reference ref.py:reference on case 'five'"
        first = int(own.run(good, "five", 3, generate(good, FIVE, 3), 60, what)["c"][0])
        with pytest.raises(ReferenceError_, match="failed: ValueError: no such row"):
            own.run(bad, "five", 3, generate(bad, FIVE, 3), 60, what)
        assert own.alive
        assert int(own.run(good, "five", 3, generate(good, FIVE, 3), 60, what)["c"][0]) == first != os.getpid()
    finally:
        own.close()


def test_a_reference_that_ends_its_process_is_an_error_and_the_next_call_gets_a_fresh_child(tmp_path):
    exits = task_with(tmp_path / "exits", "    os._exit(0)\n")
    good = task_with(tmp_path / "good", "    c[...] = os.getpid()\n")
    before = int(run_reference(good, "five", 1)["c"][0])
    with pytest.raises(ReferenceError_, match=r"^reference ref\.py:reference on case 'five': the reference process "
                                              r"exited with code 0 instead of returning \(os\._exit"):
        run_reference(exits, "five", 1)
    after = int(run_reference(good, "five", 1)["c"][0])
    assert after != before and after != os.getpid()


def test_a_reference_past_the_manifest_s_time_limit_is_stopped_and_says_how_to_allow_longer(tmp_path):
    slow = task_with(tmp_path, "    time.sleep(60)\n", reference_time_limit_s=0.3)
    with pytest.raises(ReferenceError_) as info:
        run_reference(slow, "five", 1)
    assert info.value.message == "reference ref.py:reference on case 'five' did not finish within 0.3 s; it was stopped"
    assert '"time_limit_s": SECONDS' in info.value.hint


def test_only_a_python_reference_a_model_wrote_runs_sandboxed(tmp_path):
    plain = task_with(tmp_path, "    pass\n")
    written = dataclasses.replace(plain, raw={**plain.raw, "generated": {"model": "m"}})
    assert not sandboxed(plain) and sandboxed(written)
    cuda = dataclasses.replace(written, reference=dataclasses.replace(written.reference, kind="cuda"))
    assert not sandboxed(cuda)
    assert sandbox_layers(plain) is None
