"""The cross-check of a generated task's two witnesses (the NumPy reference and a naive CUDA kernel):
the comparison is the gate's rule, the extra shapes are seeded, and the gate's runner gates the
witness on every shape as a correctness case (a scripted gate here; tests/authoring/test_from_description_gpu.py
runs the real one)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from kernel_forge.authoring.crosscheck import check_outputs, extra_cases, run_crosscheck
from kernel_forge.authoring.from_description import describe_task
from kernel_forge.config.describe import DescribeConfig
from kernel_forge.model.task import load_task

from tests.support.described_task import DESCRIPTION, GOOD, WRONG, described, numpy_witness
from tests.support.fakes import ScriptedGate

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


@pytest.mark.slow
def test_the_cross_check_catches_an_off_by_one_without_a_compiler(tmp_path):
    """The comparison is pure: a NumPy stand-in for the witness shows it on any machine."""
    res = describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(replay=str(WRONG)))
    wrong = run_crosscheck(load_task(res.manifest), tmp_path / "relu_like_witness.cu", numpy_witness())
    assert wrong.status == "disagreed"
    assert all(c.outputs[0]["first"][0]["reference"] == 0.0 for c in wrong.cases)
    good = describe_task("relu_like", DESCRIPTION, tmp_path / "good", DescribeConfig(replay=str(GOOD)))
    agreed = run_crosscheck(load_task(good.manifest), tmp_path / "good" / "relu_like_witness.cu", numpy_witness())
    assert agreed.status == "agreed"
    rolled = run_crosscheck(load_task(good.manifest), tmp_path / "good" / "relu_like_witness.cu",
                            numpy_witness(shift=1), extra=0, seed=5)
    assert rolled.status == "disagreed" and [c.case for c in rolled.cases if c.status == "agreed"] == ["one"]


def test_check_outputs_is_the_gates_rule_on_both_witnesses_outputs(tmp_path):
    task = load_task(described(tmp_path))
    case = task.case("prime")
    expected = {"y": np.linspace(-1, 1, 257)}
    got = {"y": expected["y"].astype(np.float32)}
    assert check_outputs(task, case, [3], expected, got).status == "agreed"
    bad = got["y"].copy()
    bad[[7, 100]] += 1e-3                          # beyond atol 1e-6 + rtol 1e-6
    c = check_outputs(task, case, [3], expected, {"y": bad})
    assert c.status == "disagreed" and c.outputs[0]["mismatches"] == 2
    assert [f["index"] for f in c.outputs[0]["first"]] == [[7], [100]]
    assert c.outputs[0]["first"][0]["reference"] == pytest.approx(expected["y"][7])
    # an element the witness never wrote keeps the poison: it differs too
    from kernel_forge.common.dtypes import poison_value
    unwritten = got["y"].copy()
    unwritten[-1] = poison_value(task.arg("y").param.dtype)
    c = check_outputs(task, case, [3], expected, {"y": unwritten})
    assert c.status == "disagreed" and c.outputs[0]["unwritten"] == 1
    assert "never written by the CUDA witness" in "\n".join(c.lines())
    missing = check_outputs(task, case, [3], expected, {})
    assert missing.status == "disagreed" and "no such output" in missing.detail


def test_extra_shapes_start_at_one_then_draw_odd_primes_that_fit(tmp_path):
    task = load_task(described(tmp_path))
    cases = extra_cases(task, 6, random.Random(1))
    assert [c.name for c in cases] == [f"random-{i}" for i in range(1, 7)]
    ns = [c.vars["n"] for c in cases]
    assert 1 not in ns                          # the task already has a case of size 1
    assert all(n == 2 or (n % 2 and all(n % d for d in range(3, int(n ** 0.5) + 1, 2))) for n in ns)
    assert max(ns) <= 2 * 1000003               # twice the largest non-performance size
    assert len(set(ns)) == 6 and not set(ns) & {c.vars["n"] for c in task.cases}
    assert extra_cases(task, 6, random.Random(1)) == cases          # seeded
    assert extra_cases(task, 0) == []


def test_the_gate_runner_gates_the_witness_on_every_shape_as_correctness_cases(tmp_path):
    """GateWitness without a GPU: a scripted gate stands in for the real one (tests/authoring/test_from_description_gpu.py
    runs the real one); what it is given and how its verdicts become the cross-check are real."""
    from kernel_forge.authoring.crosscheck import GateWitness

    m = described(tmp_path)
    task = load_task(m)
    seen = {}

    def factory(derived, options):
        seen["cases"] = [(c.name, c.role) for c in derived.cases]
        seen["reference"] = derived.reference.path
        seen["options"] = options
        return ScriptedGate(derived)

    runner = GateWitness(gate_factory=factory, probe=lambda: None)
    ok = run_crosscheck(task, m.parent / "relu_like_witness.cu", runner, extra=2, seed=11)
    assert ok.status == "agreed" and ok.runner == "gate"
    assert seen["cases"][:5] == [("one", "correctness"), ("prime", "correctness"), ("ragged", "correctness"),
                                 ("n16M", "correctness"), ("hidden", "correctness")]
    assert [r for _, r in seen["cases"][5:]] == ["correctness", "correctness", "performance"]   # 2 random, 1 never run
    assert seen["reference"] == (m.parent / "relu_like_reference.py").resolve()
    assert seen["options"].seed == 11 and seen["options"].extra_draws == 1 and seen["options"].repeat_check
    assert [len(c.seeds) for c in ok.cases] == [2] * 7
    witness = (m.parent / "relu_like_witness.cu").read_text()
    (tmp_path / "w_bad.cu").write_text("// fake: mismatch 100\n" + witness)
    bad = run_crosscheck(task, tmp_path / "w_bad.cu", runner, extra=0, seed=11)
    assert bad.status == "disagreed" and bad.cases[0].status == "disagreed"
    assert bad.cases[0].outputs[0]["first"] == [{"index": [3], "reference": -0.25, "witness": 1.5}]
    assert "y[3]: reference -0.25, CUDA witness 1.5" in "\n".join(bad.lines())
    (tmp_path / "w_cc.cu").write_text("// fake: compile_error 0\n" + witness)
    broken = run_crosscheck(task, tmp_path / "w_cc.cu", runner, extra=0, seed=11)
    assert broken.status == "failed" and all(c.status == "witness_failed" for c in broken.cases)
    assert "fails before any case runs: compile_error" in broken.cases[0].detail
