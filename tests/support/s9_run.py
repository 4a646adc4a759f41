"""The recorded matmul_f32 tuner run of bench/evidence/h200-2026-12-03-s9/matmul-defaults (round7-tune.tgz:
218 settings gated on an H200, the best a0107 a dispatch rule with its ncu profile), unpacked once per
session with its run.json pointed at this checkout's manifest: the run issue 32 regenerated the next
prompt of (``kforge optimize --resume RUN --dry-run``)."""
from __future__ import annotations

import json
import tarfile
import tempfile
from functools import lru_cache
from pathlib import Path

from tests.support.paths import ROOT

TGZ = ROOT / "bench" / "evidence" / "h200-2026-12-03-s9" / "matmul-defaults" / "round7-tune.tgz"


@lru_cache(maxsize=1)
def run_path() -> Path:
    out = Path(tempfile.mkdtemp(prefix="kforge-s9-"))
    with tarfile.open(TGZ) as tar:
        tar.extractall(out, filter="data")
    run = out / "runs-matmul_f32" / "run-001"
    meta = json.loads((run / "run.json").read_text())
    # the task as the run recorded it (the bundled manifest has gained a template since), in a tree
    # whose other folders are this checkout's, so its relative paths resolve as they did
    tree = out / "tree"
    (tree / "manifests").mkdir(parents=True)
    for name in ("references", "kernel_forge"):
        (tree / name).symlink_to(ROOT / name, target_is_directory=True)
    for entry in (ROOT / "manifests").iterdir():
        if entry.name != "matmul_f32.json":
            (tree / "manifests" / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (tree / "manifests" / "matmul_f32.json").write_text((run / "manifest.json").read_text())
    meta["manifest"] = str(tree / "manifests" / "matmul_f32.json")
    (run / "run.json").write_text(json.dumps(meta))      # a test fixture's own copy, outside the package
    return run


def optimizer():
    """The loop over the recorded run, as the dry run builds it (no GPU, nothing written)."""
    from kernel_forge.app import run_setup
    from kernel_forge.gate.recorded import RecordedGate
    from kernel_forge.search.loop import Optimizer
    from kernel_forge.search.retrieval import Retrieved

    run, _meta, task, (loop, _g, _p) = run_setup.recorded_run(run_path(), None)
    opt = Optimizer(task, RecordedGate.from_run(run.path), run_setup._PromptOnly(), run, loop,
                    retrieved=Retrieved.from_json(run.read_json("retrieval.json")))
    opt.load_recorded()
    return opt
