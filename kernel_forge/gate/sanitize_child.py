"""Child run under compute-sanitizer: one checked launch of one case, no memory pool."""
from __future__ import annotations

import json
import sys


def main(job_path: str) -> int:
    import cupy

    cupy.cuda.set_allocator(None)        # pooled sub-allocations would hide out-of-bounds accesses
    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.gpu.runner import CaseRunner
    from kernel_forge.model.task import load_task
    from kernel_forge.model.worker_protocol import KernelSpec, Load, RunPlan, resolve_launch

    job = json.loads(open(job_path).read())
    task = load_task(job["manifest"])
    cand = load_candidate(job["kernel"])
    runner = CaseRunner(task, separate_buffers=True)   # one block per case would hide a write past a buffer
    arch = job.get("arch") or runner.info.arch
    res = compile_source(cand.source, arch=arch, defines=cand.compile_defines(), headers=task.header_sources())
    spec = KernelSpec(kind="cuda", label=cand.name, cubin=res.cubin, entry=task.signature.name,
                      launch=cand.launch or task.launch, defines=cand.compile_defines())
    launch = resolve_launch(spec.launch, task.case(job["case"]).vars, spec.defines)
    runner.load(Load(spec, [launch]))
    runner.run(spec, RunPlan(case=job["case"], seed=job["seed"], launch=launch, repeat=False, time=False,
                             compare="none", keep=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
