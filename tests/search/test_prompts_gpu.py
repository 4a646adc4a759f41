"""GPU (issue 9): a replay run with profiling; its second prompt carries the ncu summary of the
new best, or the reason there is none.

The loop writes each iteration's prompt with ``prompts.write_prompt`` to ``prompt-NNN.md`` in the
run folder (a replay proposer makes no model call, so the prompt is read from there), and saves
the profiles of the bests with ``profile.save_profile``.  With ``KFORGE_EVIDENCE_OUT=DIR`` the
test copies the second prompt and the profiles to DIR/<task>/ for bench/evidence/.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kernel_forge.model.candidate import load_candidate

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
PROPOSALS = {
    "matmul_f32": [("../kernel_forge/kernels/gemm/matmul_f32_tiled.cu", {"TILE": 32, "RPT": 4}),
                   ("../kernel_forge/kernels/gemm/matmul_f32_regblock.cu", {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "MINB": 1})],
    "softmax_rows": [("../kernel_forge/kernels/row_softmax/softmax_rows_group.cu", {"GROUP": 128, "RPB": 1, "ITEMS": 2}),
                     ("../kernel_forge/kernels/row_softmax/softmax_rows_group.cu", {"GROUP": 256, "RPB": 1, "ITEMS": 4})],
}
HOLDOUT = {"matmul_f32": ("m=263", "n=131, k=67"), "softmax_rows": ("rows=517", "cols=3079")}


def _fixed(template: Path, defines: dict) -> str:
    cand = load_candidate(template).with_defines(defines)
    return replace(cand, tunables={}, constraints=()).render()


@pytest.mark.parametrize("name", ["matmul_f32", "softmax_rows"])
def test_the_second_prompt_of_a_replay_run_has_the_profile_of_the_new_best(tmp_path, name):
    props = tmp_path / "proposals"
    props.mkdir()
    for i, (template, defines) in enumerate(PROPOSALS[name], 1):
        (props / f"{i:02d}.cu").write_text(_fixed(ROOT / "manifests" / template, defines))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "kernel_forge", "optimize", str(ROOT / "manifests" / f"{name}.json"),
                        "--replay", str(props), "--max-iterations", "2", "--candidates", "1",
                        "--runs-dir", str(tmp_path / "runs"),
                        "--warmup", "3", "--reps", "20"], capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (run,) = sorted((tmp_path / "runs").glob("run-*"))
    second = run / "prompt-002.md"
    assert second.is_file(), f"no prompt-002.md in {run}: {sorted(x.name for x in run.iterdir())}"
    text = second.read_text()
    assert "## user: static prefix" in text and "## user: dynamic part" in text
    assert "<- the ceiling for this task" in text and "Per-SM limits" in text
    assert "## Diagnosis (per performance case)" in text and "-bound" in text
    assert ("\n  ncu: DRAM " in text) or ("No profiler metrics: " in text), "neither the ncu summary nor its reason"
    for mark in HOLDOUT[name]:
        assert mark not in text
    if name == "matmul_f32":
        assert "tensor cores: not the ceiling for this task" in text and "1070.5" not in text
    summary = json.loads((run / "summary.json").read_text())
    best = summary["best"]["id"]
    prof_file = run / "profiles" / f"{best}.json"
    profiles = sorted((run / "profiles").glob("*.json")) if (run / "profiles").is_dir() else []
    print(f"\nPROMPT {name}: {second} ({len(text)} chars); best {best}; profiles "
          + ", ".join(f"{f.stem}: {json.loads(f.read_text()).get('seconds')} s" for f in profiles))
    assert prof_file.is_file(), "the best's profile is saved in the run folder"
    prof = json.loads(prof_file.read_text())
    assert prof["available"] or prof["reason"]
    out = os.environ.get("KFORGE_EVIDENCE_OUT")
    if out:
        dest = Path(out) / name
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(second, dest / "prompt-002.md")
        for f in (run / "profiles").iterdir():
            shutil.copy(f, dest / f.name)
        shutil.copy(run / "summary.json", dest / "summary.json")
        shutil.copy(run / "report.md", dest / "report.md")
