"""What the include allow-list costs per compile (issue #35): the text scan before NVRTC, and
NVRTC's --fdevice-time-trace record (written, read and checked) against a compile without it.
Runs on the CPU (NVRTC only).  Prints one line per kernel; ``--json PATH`` writes them too.

    python bench/include_check_cost.py [--reps 7] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from kernel_forge.common import includes
from kernel_forge.gpu import nvrtc

KERNELS = {
    "vector_add": 'extern "C" __global__ void k(const float* a, const float* b, float* c, int n) '
                  "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }\n",
    "cuda_fp16": '#include <cuda_fp16.h>\nextern "C" __global__ void k(__half* x) { x[0] = __float2half(1.0f); }\n',
    "cub_block_reduce": "#include <cub/block/block_reduce.cuh>\n"
                        'extern "C" __global__ void k(float* x) { using R = cub::BlockReduce<float, 128>; '
                        "__shared__ typename R::TempStorage t; float s = R(t).Sum(x[threadIdx.x]); "
                        "if (threadIdx.x == 0) x[0] = s; }\n",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    includes.computed_include_macros(includes.Allowed.of(nvrtc.include_dirs()).roots)
    once = time.perf_counter() - t0
    rows = []
    for name, src in KERNELS.items():
        t = time.perf_counter()
        for _ in range(50):
            nvrtc.check_includes(src, defines={"BLOCK": 128})
        scan_ms = (time.perf_counter() - t) / 50 * 1e3
        samples: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.reps):                       # interleaved, so drift hits both alike
            for traced in (True, False):
                nvrtc._trace_supported()[0] = traced
                t = time.perf_counter()
                nvrtc.compile_source(src, arch=args.arch, use_cache=False)
                samples[traced].append(time.perf_counter() - t)
        nvrtc._trace_supported()[0] = True
        on, off = (statistics.median(samples[k]) * 1e3 for k in (True, False))
        rows.append({"kernel": name, "text_scan_ms": round(scan_ms, 3), "compile_traced_ms": round(on, 1),
                     "compile_untraced_ms": round(off, 1), "trace_ms": round(on - off, 1)})
        print(f"{name}: text scan {scan_ms:.2f} ms; compile {on:.1f} ms with the trace check, {off:.1f} ms "
              f"without (+{on - off:.1f} ms, {100 * (on - off) / off:+.1f} %)")
    print(f"toolkit computed-include macros, once per process: {once * 1e3:.0f} ms; NVRTC {nvrtc.nvrtc_version()}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"nvrtc": nvrtc.nvrtc_version(), "once_ms": round(once * 1e3), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
