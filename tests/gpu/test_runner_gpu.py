"""GPU suite for the harness (step 1): every bundled task end to end on a real GPU."""
import json
from pathlib import Path

import pytest

from kernel_forge.model.candidate import load_candidate, parse_candidate
from kernel_forge.app.cli import cli
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.model.task import load_task

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
TASKS = sorted(p.stem for p in (ROOT / "manifests").glob("*.json"))


def _quick(**kw):
    base = dict(warmup=2, reps=10)
    base.update(kw)
    return GateOptions.quick(**base)


@pytest.mark.parametrize("name", TASKS)
def test_initial_kernel_passes_every_case(name):
    task = load_task(ROOT / "manifests" / f"{name}.json")
    with Gate(task, GateOptions(warmup=2, reps=10)) as gate:
        ev = gate.evaluate(load_candidate(task.initial), roles=("correctness", "performance", "holdout"))
    assert ev.passed, ev.message
    assert {c.name for c in ev.cases} == {c.name for c in task.cases}
    for c in ev.cases:
        assert c.passed
        if c.role == "performance":
            assert c.timing is not None and c.timing.median > 0 and len(c.timing.samples_us) == 10
    assert ev.score_us and ev.score_us > 0


@pytest.mark.parametrize("name", [t for t in TASKS if load_task(ROOT / "manifests" / f"{t}.json").baselines])
def test_vendor_baselines_pass_verification(name):
    task = load_task(ROOT / "manifests" / f"{name}.json")
    with Gate(task, _quick()) as gate:
        for b in task.baselines:
            ev = gate.evaluate_baseline(b, roles=("correctness", "performance"))
            assert ev.passed, f"{b}: {ev.message}"
            assert ev.score_us > 0


def test_wrong_kernel_fails_with_a_mismatch_report():
    task = load_task(ROOT / "manifests" / "vector_add.json")
    wrong = parse_candidate(load_candidate(task.initial).source.replace("a[i] + b[i]", "a[i] - b[i]"),
                            name="wrong.cu")
    assert wrong.source != load_candidate(task.initial).source
    with Gate(task, _quick()) as gate:
        ev = gate.evaluate(wrong)
    assert not ev.passed and ev.reason == "mismatch"
    case = ev.failures()[0]
    out = case.outputs[0]
    assert out["mismatches"] > 0 and out["max_abs"] > 0.1 and out["first"], case.outputs
    assert "differ" in case.message and "first at" in case.message


TWICE = r'''
// kforge: grid = [cdiv(n, 256), 1, 1]
// kforge: block = [256, 1, 1]
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    c[i] = a[i] + b[i];
    // the same work again on the element half the array away: twice the reads and writes
    int j = (int)(((long long)i + n / 2) % n);
    c[j] = a[j] + b[j];
  }
}
'''

ONCE = r'''
// kforge: grid = [cdiv(n, 256), 1, 1]
// kforge: block = [256, 1, 1]
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
'''


def test_twice_the_work_measures_about_twice_as_slow():
    task = load_task(ROOT / "manifests" / "vector_add.json")
    big = max(task.cases_with("performance"), key=lambda c: c.vars["n"])
    with Gate(task, _quick(reps=30)) as gate:
        once = gate.evaluate(parse_candidate(ONCE, name="once.cu"), roles=("performance",))
        twice = gate.evaluate(parse_candidate(TWICE, name="twice.cu"), roles=("performance",))
        once2 = gate.evaluate(parse_candidate(ONCE, name="once.cu"), roles=("performance",))
    assert once.passed and twice.passed, (once.message, twice.message)
    t1 = min(once.case(big.name).timing.median, once2.case(big.name).timing.median)
    t2 = twice.case(big.name).timing.median
    # every element is read and written twice: 24 vs 12 bytes of DRAM traffic per element
    assert 1.6 < t2 / t1 < 2.4, (t1, t2)


def test_cli_eval_prints_one_row_per_case_and_json(tmp_path):
    from click.testing import CliRunner

    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["eval", str(ROOT / "manifests" / "matmul_f32.json"), "--reps", "5",
                                   "--warmup", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    assert [c["name"] for c in data["cases"]] == [c.name for c in task.cases]
    for c in data["cases"]:
        assert c["name"] in res.output
        if c["role"] == "performance":
            assert c["timing"]["median"] > 0 and c["gbps"] > 0 and c["pct_peak_flops"] > 0
            assert c["speedup_vs_baselines"]["cublas"] > 0
    assert data["calibration"]["bandwidth"] > 1e11


def test_cli_eval_exit_1_on_failure(tmp_path):
    from click.testing import CliRunner

    bad = tmp_path / "bad.cu"
    bad.write_text(ONCE.replace("a[i] + b[i]", "a[i] * b[i]"))
    res = CliRunner().invoke(cli, ["eval", str(ROOT / "manifests" / "vector_add.json"), str(bad),
                                   "--reps", "3", "--warmup", "1", "--quick"])
    assert res.exit_code == 1, res.output
    assert "mismatch" in res.output


def test_implausible_speed_is_flagged(tmp_path):
    """A kernel handed a table 100x its vectors' size that it never reads, under a manifest whose
    bytes count the table too: every buffer moved once is 412 bytes per element, so the honest
    sum of a and b (12 bytes per element) is 'faster than the memory allows' and must be
    flagged, not accepted.  (A byte count above the buffers' footprint is capped at it, so the
    buffers themselves must be there.)"""
    (tmp_path / "ref.py").write_text("import numpy as np\n\n\ndef reference(a, b, table, c, n):\n"
                                     "    np.add(a, b, out=c)\n")
    (tmp_path / "va.cu").write_text(
        'extern "C" __global__ void vector_add(const float* a, const float* b, const float* table, float* c, int n)\n'
        "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}\n")
    manifest = {
        "name": "vector_add",
        "signature": 'extern "C" __global__ void vector_add(const float* a, const float* b, const float* table, '
                     "float* c, int n)",
        "reference": {"python": "ref.py:reference"}, "initial": "va.cu",
        "args": {"a": {"shape": ["n"], "init": "normal"}, "b": {"shape": ["n"], "init": "normal"},
                 "table": {"shape": ["100*n"], "init": "normal"}, "c": {"shape": ["n"], "output": True}, "n": "n"},
        "launch": {"grid": ["cdiv(n, 256)"], "block": [256]},
        "tolerance": {"atol": 1e-6, "rtol": 1e-6},
        "cost": {"flops": "n", "bytes": "412*n"},
        "cases": [{"name": "small", "role": "correctness", "vars": {"n": 1000}},
                  {"name": "n4M", "role": "performance", "vars": {"n": 4194304}}],
    }
    (tmp_path / "va.json").write_text(json.dumps(manifest))
    task = load_task(tmp_path / "va.json")
    assert task.cost(task.case("n4M"))[1] == 412 * 4194304            # not capped: the table is there
    with Gate(task, _quick()) as gate:
        ev = gate.evaluate(load_candidate(task.initial), roles=("performance",))
    assert not ev.passed and ev.reason == "implausible", ev.message
    assert "GB/s" in ev.message


def test_cuda_reference_runs_through_the_same_harness(tmp_path):
    """A task whose trusted reference is a .cu kernel: expected outputs come from a separate
    reference worker, and a wrong candidate is still caught."""
    src = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    src["reference"] = {"cuda": str(ROOT / "manifests" / "vector_add.cu")}
    src["baselines"] = {}
    src.pop("templates", None)
    src["initial"] = str(ROOT / "manifests" / "vector_add.cu")
    (tmp_path / "va.json").write_text(json.dumps(src))
    task = load_task(tmp_path / "va.json")
    good = parse_candidate(ONCE, name="once.cu")
    wrong = parse_candidate(ONCE.replace("a[i] + b[i]", "a[i] + 2.0f * b[i]"), name="wrong.cu")
    with Gate(task, _quick()) as gate:
        ok = gate.evaluate(good, roles=("correctness", "performance"))
        bad = gate.evaluate(wrong, roles=("correctness",))
        assert gate._ref_worker is not None and gate._ref_worker.pid != gate.worker().pid
    assert ok.passed, ok.message
    assert not bad.passed and bad.reason == "mismatch"
