"""Self-contained copies of the vector_add task in a test's folder (manifest, kernel, reference: the
bad-input and full-disk tests change them freely), the same task without its initial kernel, and a
finished run of the scripted gate over such a copy."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from kernel_forge.app.run_setup import start_run
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate, vector_add, write_proposals
from tests.support.paths import ROOT

#: whether NVRTC (cuda-bindings) is installed: what compiles a kernel needs it, no GPU
try:
    import cuda.bindings.nvrtc  # noqa: F401
    HAS_NVRTC = True
except ImportError:
    HAS_NVRTC = False


def make_task(folder: Path, **changes) -> Path:
    """A self-contained copy of vector_add in ``folder`` (manifest, kernel, reference), with
    ``changes`` applied to the manifest's top level; returns the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "manifests" / "vector_add.cu", folder / "vector_add.cu")
    shutil.copy(ROOT / "references" / "vector_add.py", folder / "vector_add.py")
    data = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    data.pop("$schema")
    data.pop("templates")
    data["reference"] = {"python": "vector_add.py:reference"}
    data["baselines"] = {}
    data.update(changes)
    m = folder / "vector_add.json"
    m.write_text(json.dumps(data, indent=2))
    return m


def finished_run(root: Path, manifest: Path, fake: str = "pass 400", holdout: str | None = None) -> Path:
    """A run of the scripted gate over ``manifest`` whose best is x1.5 (the initial is 600 µs)."""
    props = write_proposals(root / "props", [vector_add(fake, holdout=holdout)])
    task = load_task(manifest)
    opt = start_run(manifest, LoopConfig(max_iterations=3), GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=root / "runs", gate=ScriptedGate(task))
    opt.run()
    return opt.run_dir.path


def no_initial(folder: Path, templates: bool = False) -> Path:
    """vector_add without its initial kernel (and, unless asked, without templates)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "references" / "vector_add.py", folder / "vector_add.py")
    data = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    for k in ("$schema", "initial", "templates"):
        data.pop(k, None)
    data["reference"] = {"python": "vector_add.py:reference"}
    data["baselines"] = {}
    if templates:
        shutil.copy(ROOT / "kernel_forge" / "kernels" / "elementwise" / "vector_add_gridstride.cu", folder / "vector_add_gridstride.cu")
        data["templates"] = ["vector_add_gridstride.cu"]
    m = folder / "vector_add.json"
    m.write_text(json.dumps(data, indent=2))
    return m


def task_with_headers(tmp_path: Path, headers: list[str]) -> Path:
    """A copy of vector_add in tmp_path/task whose manifest names ``headers`` (the task's own headers);
    returns the manifest."""
    folder = tmp_path / "task"
    folder.mkdir()
    for name in ("vector_add.cu",):
        (folder / name).write_text((ROOT / "manifests" / name).read_text())
    (folder / "vector_add.py").write_text((ROOT / "references" / "vector_add.py").read_text())
    data = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    data["reference"] = {"python": "vector_add.py:reference"}
    data["baselines"] = {}
    data.pop("templates", None)
    data["headers"] = headers
    (folder / "vector_add.json").write_text(json.dumps(data))
    return folder / "vector_add.json"
