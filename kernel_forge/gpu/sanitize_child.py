"""The child run under compute-sanitizer: one checked launch of one case through the worker's own
path (:class:`~kernel_forge.gpu.runner.CaseRunner`'s load and run), without a memory pool.

Run as ``python -m kernel_forge.gpu.sanitize_child JOB.json`` by :mod:`kernel_forge.gate.sanitizer`.
JOB holds the manifest path, the CUBIN the gate compiled (a file beside it), its entry point and
label, the case's resolved launch, the case and the seed of its inputs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(job_path: str) -> int:
    import cupy

    cupy.cuda.set_allocator(None)        # pooled sub-allocations would hide out-of-bounds accesses
    from kernel_forge.gpu.runner import CaseRunner
    from kernel_forge.model.task import load_task
    from kernel_forge.model.worker_protocol import KernelSpec, Load, ResolvedLaunch, RunPlan

    job = json.loads(Path(job_path).read_text())
    task = load_task(job["manifest"])
    spec = KernelSpec(kind="cuda", label=job["label"], cubin=Path(job["cubin"]).read_bytes(), entry=job["entry"])
    shape = job["launch"]
    launch = ResolvedLaunch(tuple(shape["grid"]), tuple(shape["block"]), int(shape.get("shared_mem", 0)),
                            bool(shape.get("cooperative", False)))
    runner = CaseRunner(task, separate_buffers=True)   # one block per case would hide a write past a buffer
    runner.load(Load(spec, [launch]))
    runner.run(spec, RunPlan(case=job["case"], seed=job["seed"], launch=launch, repeat=False, time=False,
                             compare="none", keep=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
