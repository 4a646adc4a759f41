"""--sanitize's parent side (gate/sanitizer.py) against a stand-in for compute-sanitizer that
records what it was asked to run: no GPU."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kernel_forge.gate.sanitizer import run_sanitizer, smallest_case
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import load_task
from kernel_forge.model.worker_protocol import KernelSpec, resolve_launch

ROOT = Path(__file__).resolve().parents[2]

SOURCE = r'''
// kforge: grid = [cdiv(n, 128)]
// kforge: block = [128]
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
'''

#: compute-sanitizer's stand-in: keeps its arguments, the job and the CUBIN the job names, exits 0
FAKE = '''import json, os, shutil, sys
out = os.environ["KF_FAKE_SANITIZER_OUT"]
with open(os.path.join(out, "calls.jsonl"), "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
job = json.load(open(sys.argv[-1]))
shutil.copy(sys.argv[-1], os.path.join(out, "job.json"))
shutil.copy(job["cubin"], os.path.join(out, "seen.cubin"))
'''


def test_the_sanitized_child_is_given_the_gates_cubin_and_the_smallest_cases_resolved_launch(tmp_path, monkeypatch):
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    exe = bin_dir / "compute-sanitizer"
    exe.write_text(f"#!{sys.executable}\n" + FAKE)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("KF_FAKE_SANITIZER_OUT", str(out))
    task = load_task(ROOT / "manifests" / "vector_add.json")
    cand = parse_candidate(SOURCE, name="k.cu")
    spec = KernelSpec(kind="cuda", label="k.cu", cubin=b"\x7fELF the gate's CUBIN", entry="vector_add",
                      launch=cand.launch, defines=cand.compile_defines())

    results = run_sanitizer(task, cand, spec, seed=11)

    assert [(r.tool, r.ok) for r in results] == [("memcheck", True), ("initcheck", True)]
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    assert [c[:2] for c in calls] == [["--tool", "memcheck"], ["--tool", "initcheck"]]
    assert calls[0][-3:-1] == ["-m", "kernel_forge.gpu.sanitize_child"]
    assert (out / "seen.cubin").read_bytes() == spec.cubin             # the CUBIN the gate ran, not a new compile
    case = smallest_case(task)
    job = json.loads((out / "job.json").read_text())
    assert {k: job[k] for k in ("entry", "label", "case", "seed", "launch")} == {
        "entry": "vector_add", "label": "k.cu", "case": case.name, "seed": 11,
        "launch": resolve_launch(cand.launch, case.vars, {}).to_json()}
