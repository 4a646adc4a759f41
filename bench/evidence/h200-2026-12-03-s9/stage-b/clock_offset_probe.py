"""The kernel clock's launch offset as a fresh worker measures it, beside the table's figure (GPU).

Starts a gate's worker with an empty cache directory (so it measures, gpu/clock_offset.py) and
writes what it chose: the offset, R (record minus span, each spin after the gate's L2 flush) and
N (the queued launch gap) with their samples, the back-to-back R the first version used, and
what the offset would be by the older rules (back-to-back R; medians) for comparison with the
0.86 µs measured against Nsight Compute on the H200 (KNOWN_US).  A script file, not a heredoc:
the worker is spawned, and spawn must not look for the parent's main program.

    PYTHONPATH=$PWD python bench/evidence/h200-2026-12-03-s9/stage-b/clock_offset_probe.py --out DIR/clock_offset.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]     # the repository (this script sits beside its evidence)
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--task", default=str(ROOT / "manifests" / "vector_add.json"))
    a = ap.parse_args()
    os.environ["KFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kforge-offset-")   # a fresh cache: measured
    os.environ.pop("KFORGE_CLOCK_OFFSET_US", None)
    from kernel_forge.gate.gate import Gate
    from kernel_forge.gpu.clock_offset import KNOWN_US, trimmed_mean
    from kernel_forge.model.task import load_task

    with Gate(load_task(a.task)) as gate:
        gate.ensure_gpu()
        got = dict(gate.clock_offset or {})
        got["worker_clock"] = gate._worker.clock
        got["gpu"] = gate.device["name"]
    got["table_us"] = KNOWN_US.get(got["gpu"])
    samples = got.get("samples") or {}
    r, n, b2b = samples.get("R") or [], samples.get("N") or [], samples.get("R_back_to_back") or []
    if r and n:
        got["compare"] = {
            "this method (trimmed means, R after the flush)": round(trimmed_mean(r) - trimmed_mean(n), 4),
            "medians, R after the flush": round(statistics.median(r) - statistics.median(n), 4),
            "first version (medians, R back to back)": (round(statistics.median(b2b) - statistics.median(n), 4)
                                                         if b2b else None),
            "trimmed means, R back to back": round(trimmed_mean(b2b) - trimmed_mean(n), 4) if b2b else None,
            "measured against ncu (table)": got["table_us"],
        }
    text = json.dumps(got, indent=1)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0 if got.get("source") == "measured" else 1


if __name__ == "__main__":
    sys.exit(main())
