"""Archive entries and run folders for the archive and retrieval tests.

Run folders come from the real loop (``run_setup.start_run``) with the scripted gate of
tests/support/fakes.py and replayed proposals, so run.json, env.json, manifest.json and history.json are
the real ones; synthetic entries carry the bundled tasks' own descriptions, signatures and kernels.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import start_run
from kernel_forge.archive.format import Entry
from kernel_forge.archive.store import list_entries
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.model.task import load_task
from kernel_forge.config.loop_settings import LoopConfig

from tests.support.fakes import H200, ScriptedGate, write_proposals
from tests.support.paths import MANIFESTS

GPU = H200.name
TUNED_HEADER = ("// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n"
                "// kforge: tune BLOCK = [64, 128, 256, 512]")


def run_task(tmp_path: Path, name: str, sources, *, gate=None, **loop):
    """A finished run of the bundled task ``name`` with replayed ``sources`` and the scripted gate."""
    manifest = MANIFESTS / f"{name}.json"
    task = load_task(manifest)
    props = write_proposals(tmp_path / f"props-{name}-{len(list(tmp_path.glob('props-*')))}", sources)
    # archive "off": these runs are archived by the test itself (a run's own archiving is tested apart)
    opt = start_run(manifest, LoopConfig(**{"max_iterations": 10, "archive": "off", "candidates": 1, **loop}), GateOptions(),
                    ProposerConfig(replay=str(props)), runs_dir=tmp_path / "runs", gate=gate or ScriptedGate(task))
    opt.run()
    return opt


def history(opt) -> dict:
    return json.loads((opt.run_dir.path / "history.json").read_text())


def by_label(hist: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for a in hist["attempts"]:
        out.setdefault(a["label"], []).append(a)
    return out


def kernel(name: str, fake: str, extra: str = "") -> str:
    """A bundled task's real initial kernel (or a template) carrying a ``// fake:`` verdict."""
    path = MANIFESTS / name if name.endswith(".cu") else MANIFESTS / f"{name}.cu"
    return f"// fake: {fake}\n{extra}" + path.read_text()


def entry(task: str, score: float, *, source: str | None = None, gpu: str = GPU, label: str = "l",
          defines: dict | None = None, description: str | None = None, signature: str | None = None,
          task_hash: str | None = None, proposer: str = "tune", attempt: str = "a0001") -> Entry:
    """A synthetic entry; description, signature and source default to the bundled task's own."""
    raw = json.loads((MANIFESTS / f"{task}.json").read_text()) if (MANIFESTS / f"{task}.json").exists() else {}
    src = source if source is not None else ((MANIFESTS / f"{task}.cu").read_text() + f"// {score} {defines}\n")
    return Entry(task_name=task, task_description=description if description is not None else raw.get("description", ""),
                 task_signature=signature or raw.get("signature", f"void {task}()"),
                 task_hash=task_hash or hashlib.sha256(task.encode()).hexdigest(), source=src, launch=None,
                 defines=dict(defines or {}), label=label, proposer=proposer, score_us=score,
                 speedup_vs_initial=600.0 / score, speedup_vs_baselines={"vendor": 250.0 / score},
                 cases=[{"name": "big", "median_us": score, "gbps": 100.0, "tflops": None, "pct_peak_bw": 42.0,
                         "pct_peak_flops": None, "bound": "memory"}],
                 bound="memory", diagnosis=None, holdout="passed", gpu_name=gpu, gpu_arch="sm_90", driver="13.0",
                 nvrtc="13.0", run=f"/runs/{task}", attempt=attempt)


def dump(a) -> list[dict]:
    return sorted((e.to_json() for e in list_entries(a)), key=lambda d: d["content_hash"])
