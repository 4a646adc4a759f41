"""Does a kernel's time depend on where its buffers lie?  The histogram's bins, placed at many
addresses, timed one by one (GPU).

Issue: the histogram's initial kernel timed 6,391 µs under the full gate and 4,410 µs under
--quick, each stable across rounds (H200, bench/evidence/h200-2026-12-02-s6); its 256 bins take
millions of global atomics, whose throughput depends on which L2 slices the bins' lines map to.
This probe puts the bins (1 KiB) at offsets 0 .. 1 MiB within one 2 MiB page, and at offset 0 of
twelve different pages, and times the initial kernel and the histogram_shared template (their
task's n16M case, seed 0, the gate's L2 flush before each launch, CUDA events, median of 5) at
each.  A spread across offsets within a page says the address bits below 2 MiB decide (the gate
now gives every buffer the same offset in every mode and worker: gpu/resident.py); a spread
across pages at one offset says the physical page does (nothing a user-space allocator can fix).

    PYTHONPATH=$PWD python bench/evidence/h200-2026-12-03-s9/stage-b/placement_probe.py --out DIR/placement.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]     # the repository (this script sits beside its evidence)
sys.path.insert(0, str(ROOT))

IN_PAGE = (0, 128, 256, 384, 512, 1024, 2048, 4096, 16384, 65536, 262144, 1 << 20)
PAGES = 12
REPS = 5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--case", default="n16M")
    a = ap.parse_args()
    import cupy as cp
    import numpy as np

    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.gpu import driver
    from kernel_forge.gpu.flush import L2Flusher
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.gpu.resident import PAGE, Block
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.task import load_task
    from kernel_forge.model.worker_protocol import resolve_launch

    t0 = time.perf_counter()
    driver.probe()
    cp.cuda.Device(0).use()
    cp.zeros(1)
    info = driver.device_info(0)
    task = load_task(ROOT / "manifests" / "histogram.json")
    case = task.case(a.case)
    host = generate(task, case, 0)
    x = np.ascontiguousarray(host.buffers["x"])
    n, nbins = int(host.scalars["n"]), int(host.scalars["nbins"])
    x_pages = -(-x.nbytes // PAGE)
    block = Block((x_pages + PAGES + 1) * PAGE)
    stream = cp.cuda.Stream(non_blocking=True)
    xdev = block.array(0, x.shape, x.dtype)
    xdev.set(x, stream=stream)
    flusher = L2Flusher(info.l2_bytes, info.sms, arch=info.arch)
    placements = [("offset in a page", o, (x_pages) * PAGE + o) for o in IN_PAGE]
    placements += [("page, offset 0", p, (x_pages + p) * PAGE) for p in range(1, PAGES + 1)]
    drv = driver._driver()
    out = {"gpu": info.name, "case": case.name, "n": n, "nbins": nbins, "flush": flusher.kind,
           "block_base_mod_2MiB": block.base % PAGE, "kernels": {}}
    kernels = [("initial", task.initial)] + [(Path(t).stem, t) for t in task.templates]
    for label, path in kernels:
        cand = load_candidate(path)
        defines = cand.compile_defines()
        cubin = compile_source(cand.source, arch=info.arch, defines=defines, file_label=Path(path).name).cubin
        mod = driver.Module(cubin, task.signature.name)
        launch = resolve_launch(cand.launch or task.launch, case.vars, defines)
        if launch.shared_mem > 48 * 1024:
            mod.set_max_dynamic_smem(launch.shared_mem)
        rows = []
        for kind, where, offset in placements:
            bins = block.array(offset, (nbins,), np.uint32)
            args = driver.PackedArgs([(int(xdev.data.ptr), driver.ctypes.c_void_p),
                                      (int(bins.data.ptr), driver.ctypes.c_void_p),
                                      (n, driver.ctypes.c_int), (nbins, driver.ctypes.c_int)])
            samples = []
            for _ in range(REPS + 1):                       # the first is a warm-up
                start, end = cp.cuda.Event(), cp.cuda.Event()
                driver.check(drv.cuMemsetD32Async(int(bins.data.ptr), 0, nbins, drv.CUstream(stream.ptr)), "memset")
                flusher(stream)
                start.record(stream)
                driver.launch(mod, launch.grid, launch.block, launch.shared_mem, stream.ptr, args)
                end.record(stream)
                end.synchronize()
                samples.append(cp.cuda.get_elapsed_time(start, end) * 1000.0)
            counts = bins.get()
            rows.append({"placement": kind, "at": where, "offset_in_page": offset % PAGE,
                         "median_us": round(statistics.median(samples[1:]), 2), "counted": int(counts.sum())})
        mod.unload()
        in_page = [r["median_us"] for r in rows if r["placement"] == "offset in a page"]
        pages = [r["median_us"] for r in rows if r["placement"] == "page, offset 0"]
        out["kernels"][label] = {
            "rows": rows,
            "offsets_in_a_page": {"min_us": min(in_page), "max_us": max(in_page), "max_over_min": round(max(in_page) / min(in_page), 3)},
            "pages_at_offset_0": {"min_us": min(pages), "max_us": max(pages), "max_over_min": round(max(pages) / min(pages), 3)},
        }
        print(f"[placement] {label}: within a page {min(in_page):.1f}-{max(in_page):.1f} us; "
              f"across pages {min(pages):.1f}-{max(pages):.1f} us", flush=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(out, indent=1)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
