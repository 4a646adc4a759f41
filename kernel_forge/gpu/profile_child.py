"""The process Nsight Compute profiles: load a task, compile one candidate, launch it on some cases.

Run as ``python -m kernel_forge.gpu.profile_child SPEC.json`` by :mod:`kernel_forge.gate.profiler`
under ``ncu``.  SPEC holds the manifest path, the candidate's source, defines and launch, the
cases, the seed of the inputs (the gate's first draw), the device ordinal, the arch and the
launches per case.  Inputs are drawn with :func:`kernel_forge.model.inputs.generate` exactly as the gate
draws them; in/out buffers are reset before every launch.  It writes nothing to stdout (that is
ncu's CSV); what it did (or the error that stopped it) goes to SPEC's ``status`` file as
``{"plan": [{"case", "launches", "grid", "block", "shared_mem"}], "error": str | None}``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def run(spec: dict, status: dict) -> None:
    import cupy as cp

    from kernel_forge.model.candidate import Launch
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.task import load_task
    from kernel_forge.gpu import driver
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.gpu.launch import scalar_arg

    task = load_task(spec["manifest"])
    driver.probe()
    cp.cuda.Device(int(spec.get("device", 0))).use()
    cp.zeros(1)   # CuPy's primary context becomes current for the driver calls
    info = driver.device_info(int(spec.get("device", 0)))
    compiled = compile_source(spec["source"], arch=spec["arch"], defines=spec.get("defines") or {},
                              file_label=spec.get("file_label") or "kernel.cu", headers=task.header_sources())
    mod = driver.Module(compiled.cubin, task.signature.name)
    launch = Launch(tuple(spec["launch"]["grid"]), tuple(spec["launch"]["block"]),
                    spec["launch"].get("shared_mem", 0), bool(spec["launch"].get("cooperative", False))
                    ) if spec.get("launch") else task.launch
    stream = cp.cuda.Stream(non_blocking=True)
    launches = max(1, int(spec.get("launches", 1)))
    for name in spec["cases"]:
        case = task.case(name)
        inputs = generate(task, case, int(spec.get("seed", 0)))
        dev = {a.name: cp.asarray(inputs.buffers[a.name]) for a in task.args if a.is_buffer}
        pristine = {a.name: dev[a.name].copy() for a in task.args if a.is_buffer and a.in_out}
        cp.cuda.Device().synchronize()   # uploaded on the default stream, which `stream` does not wait for
        grid, block, smem = launch.resolve({**case.vars, **(spec.get("defines") or {})})
        if smem > info.max_smem_per_block:
            mod.set_max_dynamic_smem(smem)
        values = [(dev[a.name].data.ptr, driver.ctypes.c_void_p) if a.is_buffer else scalar_arg(a.param, inputs.scalars[a.name])
                  for a in task.args]
        packed = driver.PackedArgs(values)
        for _ in range(launches):
            with stream:
                for k, p in pristine.items():
                    cp.copyto(dev[k], p)
            driver.launch(mod, grid, block, smem, stream.ptr, packed, cooperative=launch.cooperative)
            stream.synchronize()
        driver.synchronize("profiled launches")
        status["plan"].append({"case": name, "launches": launches, "grid": list(grid), "block": list(block),
                               "shared_mem": smem})
        dev.clear()
        pristine.clear()
        cp.get_default_memory_pool().free_all_blocks()


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    status: dict = {"plan": [], "error": None}
    try:
        run(spec, status)
    except BaseException as exc:  # noqa: BLE001 - reported through the status file
        status["error"] = f"{type(exc).__name__}: {exc}"
    from kernel_forge.common.writes import write_text
    write_text(spec["status"], json.dumps(status))
    return 0 if status["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
