"""Writes tests/data/dispatch/*.json: per-case timings of every setting a tuner gated on the H200,
taken from recorded runs committed under bench/evidence (nothing is made up).

Run from the repository root: ``python tests/data/dispatch/make_measured.py``.  Each file holds
the task's cases (from the run's manifest snapshot) and, per passed setting of one template, its
defines and per performance case the median, p20 and p80 (µs) from history.json.
"""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent

SOURCES = [
    # (archive, run folder inside it, template label, output name)
    ("bench/evidence/h200-2026-12-01-s5/final/optimize-run.tgz", "opt/run-001", "matmul_f32_regblock.cu",
     "matmul_regblock_h200.json"),
    ("bench/evidence/h200-2026-12-01-s5/final/optimize-run.tgz", "opt/run-001", "matmul_f32_tiled.cu",
     "matmul_tiled_h200.json"),
    ("bench/evidence/h200-2026-11-30-s3/5-final/tune-runs.tgz", "./runs-layernorm/run-001", "layernorm_group.cu",
     "layernorm_group_h200.json"),
    ("bench/evidence/h200-2026-11-30-s3/5-final/tune-runs.tgz", "./runs-softmax_rows/run-001", "softmax_rows_group.cu",
     "softmax_rows_group_h200.json"),
    ("bench/evidence/h200-2026-11-30-s3/5-final/tune-runs.tgz", "./runs-transpose/run-001", "transpose_tiled.cu",
     "transpose_tiled_h200.json"),
    ("bench/evidence/h200-2026-11-30-s3/5-final/tune-runs.tgz", "./runs-vector_add/run-001", "vector_add_vec4.cu",
     "vector_add_vec4_h200.json"),
]


def _member(tar: tarfile.TarFile, name: str) -> dict:
    f = tar.extractfile(name)
    return json.load(io.TextIOWrapper(f, encoding="utf-8"))


def extract(archive: str, run: str, label: str) -> dict:
    with tarfile.open(ROOT / archive) as tar:
        hist = _member(tar, f"{run}/history.json")
        manifest = _member(tar, f"{run}/manifest.json")
    settings = []
    for a in hist["attempts"]:
        ev = a.get("evaluation") or {}
        if a["label"] != label or a["status"] != "passed" or not ev.get("passed"):
            continue
        cases = {c["name"]: {k: c["timing"][k] for k in ("median", "p20", "p80")}
                 for c in ev["cases"] if c.get("timing")}
        settings.append({"id": a["id"], "defines": a["defines"], "cases": cases})
    return {"source": f"{archive}: {run}/history.json (attempts labelled {label})", "task": hist["task"],
            "label": label, "cases": [{"name": c["name"], "role": c["role"], "vars": c["vars"]}
                                      for c in manifest["cases"]],
            "settings": settings}


def main() -> None:
    for archive, run, label, name in SOURCES:
        data = extract(archive, run, label)
        (OUT / name).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {name}: {len(data['settings'])} settings of {label}")


if __name__ == "__main__":
    main()
