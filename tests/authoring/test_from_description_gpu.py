"""GPU suite for issue 21: the CUDA witness of a generated task through the real gate, and a task
without an initial kernel optimised from its first passing translation (H200).

Run alone: ``python -m pytest -q tests/authoring/test_from_description_gpu.py`` (about a minute of GPU time).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.config.describe import DescribeConfig
from kernel_forge.authoring.from_description import describe_task
from kernel_forge.evidence.run_dir import RunDir, validate_file

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "describe"
DESCRIPTION = ("Leaky ReLU over n float32 values: y[i] = x[i] where x[i] > 0, else 0.01 * x[i]. "
               "n can be any size, including 1.")
FAST = ["--warmup", "3", "--reps", "30"]

#: a correct but slow first translation: 512 threads walk all n elements
SLOW_TRANSLATION = """// kforge: grid = [4]
// kforge: block = [128]
extern "C" __global__ void relu_like(const float* x, float* y, int n)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.01f * v;
    }
}
"""
#: a translation with an off-by-one: the last element is never written
WRONG_TRANSLATION = """extern "C" __global__ void relu_like(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n - 1) return;
    float v = x[i];
    y[i] = v > 0.0f ? v : 0.01f * v;
}
"""
#: one thread per element, four elements per thread where they are whole
FAST_KERNEL = """// kforge: grid = [max(1, cdiv(n, 4 * 256))]
// kforge: block = [256]
extern "C" __global__ void relu_like(const float* x, float* y, int n)
{
    long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 < n) {
        float4 v = *reinterpret_cast<const float4*>(x + i);
        float4 r;
        r.x = v.x > 0.0f ? v.x : 0.01f * v.x;
        r.y = v.y > 0.0f ? v.y : 0.01f * v.y;
        r.z = v.z > 0.0f ? v.z : 0.01f * v.z;
        r.w = v.w > 0.0f ? v.w : 0.01f * v.w;
        *reinterpret_cast<float4*>(y + i) = r;
    } else {
        for (; i < n; i++) {
            float v = x[i];
            y[i] = v > 0.0f ? v : 0.01f * v;
        }
    }
}
"""


def test_the_witness_runs_through_the_real_gate_and_agrees_with_the_reference(tmp_path):
    """init runs nothing; validate --accept runs the reference in the sandbox and the witness
    through the real gate on every case and four random shapes, two draws each."""
    res = describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(replay=str(DATA / "relu_like")))
    print("\n" + "\n".join(res.lines))
    r = CliRunner().invoke(cli, ["validate", "--accept", str(res.manifest)])
    print(r.output)
    assert r.exit_code == 0 and "accepted by" in r.output, r.output
    assert "the reference ran in the sandbox" in r.output and "agree on all 9 shapes" in r.output
    check = json.loads((tmp_path / "relu_like_describe" / "crosscheck-accept.json").read_text())
    assert check["status"] == "agreed" and check["runner"] == "gate"
    assert len(check["cases"]) == 9 and all(len(c["seeds"]) == 2 for c in check["cases"])       # two draws
    assert json.loads(res.manifest.read_text())["generated"]["accepted"] is True


def test_the_real_gate_catches_the_planted_off_by_one_with_both_values(tmp_path):
    from kernel_forge.authoring.crosscheck import GateWitness, run_crosscheck
    from kernel_forge.model.reference_process import sandbox_layers
    from kernel_forge.model.task import load_task

    res = describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(replay=str(DATA / "relu_like_off_by_one")))
    task = load_task(res.manifest)
    check = run_crosscheck(task, tmp_path / "relu_like_witness.cu", GateWitness())
    text = "\n".join(check.lines())
    print("\n" + text)
    assert check.status == "disagreed"
    for c in check.cases:
        n = c.vars["n"]
        first = c.outputs[0]["first"][0]
        assert c.status == "disagreed" and first["index"] == [n - 1] and first["reference"] == 0.0
        assert f"y[{n - 1}]: reference 0.0, CUDA witness" in text
    assert sandbox_layers(task)                 # the gate's expected values came from the sandboxed reference
    r = CliRunner().invoke(cli, ["validate", "--accept", str(res.manifest)])
    assert r.exit_code == 2 and "case one: output y is all zeros" in r.output     # the lint refuses it first


def test_a_task_without_an_initial_kernel_takes_its_first_passing_translation_as_baseline(tmp_path):
    res = describe_task("relu_like", DESCRIPTION, tmp_path / "task", DescribeConfig(replay=str(DATA / "relu_like")))
    m = res.manifest
    assert CliRunner().invoke(cli, ["validate", "--accept", str(m)]).exit_code == 0
    props = tmp_path / "props"
    props.mkdir()
    for name, src in (("1_wrong.cu", WRONG_TRANSLATION), ("2_slow.cu", SLOW_TRANSLATION), ("3_fast.cu", FAST_KERNEL)):
        (props / name).write_text(src)
    r = CliRunner().invoke(cli, ["optimize", str(m), "--replay", str(props), "--max-iterations", "5",
                                 "--runs-dir", str(tmp_path / "runs"), "--archive", "off", "--no-profile", *FAST])
    print(r.output)
    assert r.exit_code == 0, r.output
    run = tmp_path / "runs" / "run-001"
    for f in RunDir(run).json_files():
        validate_file(f)
    hist = json.loads((run / "history.json").read_text())
    by = {a["label"]: a for a in hist["attempts"]}
    assert by["1_wrong.cu"]["status"] == "failed" and by["1_wrong.cu"]["reason"] == "unwritten"
    assert by["2_slow.cu"]["baseline"] is True and by["2_slow.cu"]["holdout"]["passed"] is True
    summary = json.loads((run / "summary.json").read_text())
    assert summary["initial"]["origin"] == "translation" and summary["initial"]["id"] == by["2_slow.cu"]["id"]
    assert summary["best"]["label"] == "3_fast.cu" and summary["best"]["speedup_vs_initial"] > 2
    assert summary["best"]["holdout"]["passed"] is True and summary["generated"]["review"] == "accepted"
    assert json.loads((run / "run.json").read_text())["baseline"] == "translation"
    report = (run / "report.md").read_text()
    assert f"**baseline {by['2_slow.cu']['id']}**" in report and "heatmap.png" in report
    assert (run / "heatmap.png").is_file()
    replayed = CliRunner().invoke(cli, ["replay", str(run / "best-case-n16M.json"), *FAST])
    print(replayed.output)
    assert replayed.exit_code == 0 and "does NOT hold" not in replayed.output
