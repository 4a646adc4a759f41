"""Compile CUDA C++ to CUBIN with NVRTC (``cuda.bindings.nvrtc``), with a content-addressed cache.

Works without a GPU: pass ``arch`` ("sm_90").  Headers (cuda_fp16.h, cuda_bf16.h, CCCL) come
from pip packages found by ``cuda.pathfinder``; with NVRTC >= 13.3 the bundled headers are used
as a fallback.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernel_forge.common.errors import CompileError, EnvironmentProblem

PROGRAM_NAME = "kernel.cu"
_ERROR_LINE = re.compile(r"^(?:.*?)\((\d+)\): (?:catastrophic )?(error|warning)[^:]*: (.*)$", re.M)
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame")


@dataclass
class CompileResult:
    cubin: bytes
    log: str
    arch: str
    options: tuple[str, ...]
    nvrtc_version: str
    seconds: float
    cached: bool
    resources: dict = field(default_factory=dict)  # registers, spill_stores, spill_loads, smem, stack
    ptx: str = ""           # the PTX of the same compile: what the compiled-code rules read (common/compiled_rules.py)

    def to_json(self) -> dict:
        return {"arch": self.arch, "options": list(self.options), "nvrtc": self.nvrtc_version,
                "seconds": round(self.seconds, 4), "cached": self.cached, "log": self.log,
                "resources": self.resources, "cubin_bytes": len(self.cubin)}


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise EnvironmentProblem(
            f"cuda-bindings is not installed ({exc})",
            hint='pip install "cuda-kernel-forge[cu13]" (or [cu12] for CUDA 12 drivers)') from None
    return nvrtc


def _check(result, call: str):
    nvrtc = _nvrtc()
    status = result[0]
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(status)
        raise EnvironmentProblem(f"{call} failed: {msg.decode(errors='replace')}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


def supported_archs() -> list[int]:
    nvrtc = _nvrtc()
    n = _check(nvrtc.nvrtcGetNumSupportedArchs(), "nvrtcGetNumSupportedArchs")
    return list(_check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs") or [])[:n]


def include_dirs() -> list[str]:
    """Header folders from pip packages (cudart headers for cuda_fp16/bf16, CCCL)."""
    dirs = []
    try:
        from cuda import pathfinder
    except ImportError:
        return dirs
    for lib in ("cudart", "cccl"):
        try:
            d = pathfinder.find_nvidia_header_directory(lib)
        except Exception:  # noqa: BLE001 - a missing optional header package is fine here
            d = None
        if d and d not in dirs:
            dirs.append(str(d))
    return dirs


def cache_dir() -> Path:
    env = os.environ.get("KFORGE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernel_forge" / "cubin"


@functools.cache
def serves_from_driver_cache() -> bool:
    """NVRTC 12.9 and later may serve a CUBIN from the CUDA driver's compute cache without running
    ptxas, and then its log has no ``-v`` report: no registers, spills or shared memory for the
    diagnosis and the occupancy.  Where that can happen every compile passes ``--no-cache``; our own
    cache (keyed on source, options and NVRTC version) keeps the log with the CUBIN."""
    major, minor = (int(x) for x in nvrtc_version().split("."))
    return (major, minor) >= (12, 9)


def build_options(arch: str, defines: dict | None = None, extra: tuple[str, ...] = (),
                  lineinfo: bool = True) -> tuple[str, ...]:
    from kernel_forge.gpu import prelude

    opts = [f"--gpu-architecture={arch}", "--std=c++17", "--ptxas-options=-v", prelude.OPTION]
    if serves_from_driver_cache():
        opts.append("--no-cache")
    if lineinfo:
        opts.append("-lineinfo")
    for k, v in sorted((defines or {}).items()):
        opts.append(f"-D{k}={v}")
    opts.extend(extra)
    for d in include_dirs():
        opts.append(f"--include-path={d}")
    return tuple(opts)


def parse_resources(log: str) -> dict:
    res = {}
    if m := _PTXAS_REGS.search(log):
        res["registers"] = int(m.group(1))
    if m := _PTXAS_SPILL.search(log):
        res["spill_stores"], res["spill_loads"] = int(m.group(1)), int(m.group(2))
    if m := _PTXAS_SMEM.search(log):
        res["smem"] = int(m.group(1))
    if m := _PTXAS_STACK.search(log):
        res["stack"] = int(m.group(1))
    return res


def error_lines(log: str) -> list[tuple[int, str]]:
    """(kernel line, message) for every error NVRTC reported."""
    return [(int(m.group(1)), m.group(3)) for m in _ERROR_LINE.finditer(log) if m.group(2) == "error"]


@functools.lru_cache(maxsize=16)
def source_digest(source: str) -> str:
    """sha256 of a kernel's source, made once per source: the settings of one kernel (a dispatch
    rule's lines, a tuner's settings) are compiled from the same text, and hashing it again for
    each made compiling N settings of an N-line rule take time growing as N squared."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _cache_key(source: str, options: tuple[str, ...], version: str) -> str:
    portable = [o for o in options if not o.startswith("--include-path=")]
    h = hashlib.sha256()
    h.update(json.dumps([source_digest(source), portable, version]).encode())
    return h.hexdigest()


def compile_source(source: str, *, arch: str, defines: dict | None = None,
                   extra_options: tuple[str, ...] = (), use_cache: bool = True,
                   file_label: str = PROGRAM_NAME) -> CompileResult:
    """Compile ``source`` to CUBIN for ``arch`` (e.g. "sm_90"). Raise :class:`CompileError`
    with NVRTC's log and the kernel lines it names on failure."""
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise CompileError(f"arch must look like sm_90 (got {arch!r}); NVRTC is asked for CUBIN, "
                           "never PTX, so the result loads on drivers older than NVRTC")
    nvrtc = _nvrtc()
    version = nvrtc_version()
    options = build_options(arch, defines, extra_options)
    key = _cache_key(source, options, version)
    cdir = cache_dir()
    cubin_path, meta_path = cdir / f"{key}.cubin", cdir / f"{key}.json"
    if use_cache and cubin_path.is_file() and meta_path.is_file():
        t0 = time.perf_counter()
        try:
            meta = json.loads(meta_path.read_text())
            cubin = cubin_path.read_bytes()
            if "registers" in meta.get("resources", {}) and meta.get("ptx"):
                return CompileResult(cubin, meta["log"], arch, options, version,
                                     time.perf_counter() - t0, True, meta["resources"], meta["ptx"])
            # else an entry without ptxas's report (a cache directory copied or shared from elsewhere;
            # entries made without --no-cache have keys of their own) or without the PTX the compiled-code
            # rules read (made before they existed): as good as damaged, compile again
        except (OSError, ValueError, KeyError, AttributeError):
            pass  # a damaged cache entry: compile again

    t0 = time.perf_counter()
    from kernel_forge.gpu import prelude

    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), file_label.encode(), *prelude.headers()),
                  "nvrtcCreateProgram")
    try:
        err, = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        log_size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = bytearray(max(int(log_size), 1))  # never b" " * n: see GPU-NOTES
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = bytes(buf).rstrip(b"\x00").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            lines = error_lines(log)
            first = f"line {lines[0][0]}: {lines[0][1]}" if lines else log.strip().splitlines()[-1:] or ["(no log)"]
            if isinstance(first, list):
                first = first[0]
            src_lines = source.splitlines()
            shown = ""
            if lines and 0 < lines[0][0] <= len(src_lines):
                shown = f"\n    {lines[0][0]:4d} | {src_lines[lines[0][0] - 1]}"
            raise CompileError(f"{file_label}: NVRTC could not compile it: {first}{shown}",
                               log=log, lines=tuple(n for n, _ in lines), hint=prelude.hint_for(log))
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin_buf = bytearray(int(size))
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin_buf), "nvrtcGetCUBIN")
        cubin = bytes(cubin_buf)
        size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        ptx_buf = bytearray(max(int(size), 1))
        _check(nvrtc.nvrtcGetPTX(prog, ptx_buf), "nvrtcGetPTX")
        ptx = bytes(ptx_buf).rstrip(b"\x00").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - t0
    result = CompileResult(cubin, log, arch, options, version, seconds, False, parse_resources(log), ptx)
    if use_cache:
        _store(cdir, cubin_path, meta_path, result)
    return result


def _store(cdir: Path, cubin_path: Path, meta_path: Path, result: CompileResult) -> None:
    from kernel_forge.common.writes import WriteFailed, write_files

    try:
        write_files([(cubin_path, result.cubin),
                     (meta_path, json.dumps({"log": result.log, "resources": result.resources,
                                             "ptx": result.ptx}).encode())])
    except (WriteFailed, OSError):
        pass  # the cache is an optimisation; a read-only home or a full disk must not fail a compile
