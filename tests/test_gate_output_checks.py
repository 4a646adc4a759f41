"""The gate's output checks on a worker's answer (no GPU: answers are built here)."""
import numpy as np
import pytest

from kernel_forge.dtypes import FLOAT32, poison_value
from kernel_forge.gate import Gate, GateOptions
from kernel_forge.task import load_task
from kernel_forge.verdict import CaseResult

from conftest import ROOT


@pytest.fixture(scope="module")
def gate():
    g = Gate(load_task(ROOT / "manifests" / "vector_add.json"), GateOptions(arch="sm_90"))
    yield g
    g.close()


def _check(gate, **stages):
    """Run the gate's checks on an answer holding ``stages`` (name -> c values); returns the result."""
    expected = np.linspace(-1.0, 1.0, 5000)
    good = expected.astype(np.float32)
    out = {k: {"c": good if v is None else v} for k, v in stages.items()}
    out["mid_timing_launch"] = 17
    res = CaseResult("odd", "correctness", False, seeds=[0])
    problem = gate._check_outputs(gate.task.case("odd"), out, {"c": expected}, res, draw=0)
    return problem, res


def _stale():
    c = np.linspace(-1.0, 1.0, 5000).astype(np.float32)
    c[4000:] = poison_value(FLOAT32)
    return c


def _jittered():
    # within atol 1e-6 + rtol 1e-6 of the reference, but not bit-for-bit the first launch's values
    return np.nextafter(np.linspace(-1.0, 1.0, 5000).astype(np.float32), np.float32(2))


def test_identical_outputs_at_every_stage_pass(gate):
    problem, res = _check(gate, outputs=None, outputs_repeat=None, outputs_after_timing=None,
                          outputs_mid_timing=None)
    assert not problem and res.outputs[0]["ok"]


@pytest.mark.parametrize("stage, text", [("outputs_after_timing", "after timing"),
                                         ("outputs_mid_timing", "after timed launch 17")])
def test_stale_outputs_after_timing_are_caught(gate, stage, text):
    problem, res = _check(gate, outputs=None, outputs_repeat=None, **{stage: _stale()})
    assert problem and res.reason == "stale_after_timing"
    assert text in res.message and "1000 never written" in res.message


def test_outputs_after_timing_that_differ_but_are_within_tolerance_pass(gate):
    problem, res = _check(gate, outputs=None, outputs_after_timing=_jittered(), outputs_mid_timing=_jittered())
    assert not problem, res.message


def test_a_wrong_first_launch_is_a_mismatch_even_if_later_stages_are_right(gate):
    wrong = np.linspace(-1.0, 1.0, 5000).astype(np.float32) * 2
    problem, res = _check(gate, outputs=wrong, outputs_after_timing=None)
    assert problem and res.reason == "mismatch" and "first launch" in res.message


def test_a_second_launch_that_differs_bit_for_bit_is_nondeterministic(gate):
    problem, res = _check(gate, outputs=None, outputs_repeat=_jittered())
    assert problem and res.reason == "nondeterministic"


def test_a_stage_sent_as_the_first_launchs_own_array_is_not_checked_again(gate, monkeypatch):
    import kernel_forge.gate as gate_module

    calls = []
    real = gate_module.compare
    monkeypatch.setattr(gate_module, "compare", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    first = np.linspace(-1.0, 1.0, 5000).astype(np.float32)
    problem, res = _check(gate, outputs=first, outputs_repeat=first, outputs_after_timing=first,
                          outputs_mid_timing=first)
    assert not problem and calls == ["c"]
    calls.clear()
    problem, res = _check(gate, outputs=first, outputs_repeat=first, outputs_after_timing=_jittered(),
                          outputs_mid_timing=first)
    assert not problem and calls == ["c", "c"]      # only the stage that differs is checked again


def test_the_workers_answer_keeps_unchanged_stages_shared_through_the_pipe():
    # the worker relies on this: a stage that is the first launch's array costs nothing to send
    from multiprocessing.reduction import ForkingPickler

    first = np.arange(1 << 20, dtype=np.float32)
    other = first + 1
    answer = {"outputs": {"c": first}, "outputs_repeat": {"c": first},
              "outputs_after_timing": {"c": first}, "outputs_mid_timing": {"c": other}}
    data = bytes(ForkingPickler.dumps(answer))
    got = ForkingPickler.loads(data)
    assert got["outputs_repeat"]["c"] is got["outputs"]["c"] is got["outputs_after_timing"]["c"]
    assert got["outputs_mid_timing"]["c"] is not got["outputs"]["c"]
    assert len(data) < 2.1 * first.nbytes           # two arrays' bytes, not four
