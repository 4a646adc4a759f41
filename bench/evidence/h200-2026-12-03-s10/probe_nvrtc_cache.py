"""Does NVRTC on this machine serve a repeated compile from the CUDA driver's compute cache, without
ptxas's ``-v`` report (registers, spills)?  Three identical compiles of a source new to the cache,
without and with ``--no-cache``, before and after cuInit (GPU machine; prints one line a compile).

    python bench/evidence/h200-2026-12-03-s10/probe_nvrtc_cache.py
"""
import time
from pathlib import Path

from cuda.bindings import driver, nvrtc

SOURCE = (Path(__file__).resolve().parents[3] / "manifests" / "vector_add.cu").read_text()


def compile_three(label: str, options: list[bytes]) -> None:
    src = (SOURCE + f"\n// probe {label} {time.time()}\n").encode()
    for i in range(3):
        _, prog = nvrtc.nvrtcCreateProgram(src, b"k.cu", 0, [], [])
        t0 = time.perf_counter()
        err, = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        ms = (time.perf_counter() - t0) * 1e3
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = bytearray(max(size, 1))
        nvrtc.nvrtcGetProgramLog(prog, log)
        nvrtc.nvrtcDestroyProgram(prog)
        seen = "ptxas report present" if b"registers" in log else f"NO ptxas report (log {len(log)} bytes)"
        print(f"{label:28s} compile {i + 1}: {err.name}, {ms:6.1f} ms, {seen}", flush=True)


if __name__ == "__main__":
    print("NVRTC", "%d.%d" % tuple(nvrtc.nvrtcVersion()[1:]))
    base = [b"--gpu-architecture=sm_90", b"--ptxas-options=-v"]
    compile_three("no cuInit", base)
    driver.cuInit(0)
    compile_three("after cuInit", base)
    compile_three("after cuInit, --no-cache", base + [b"--no-cache"])
