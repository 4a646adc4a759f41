"""Compile CUDA C++ to CUBIN with NVRTC (``cuda.bindings.nvrtc``), with a content-addressed cache.

Works without a GPU: pass ``arch`` ("sm_90").  Headers (cuda_fp16.h, cuda_bf16.h, CCCL) come
from pip packages found by ``cuda.pathfinder``; with NVRTC >= 13.3 the bundled headers are used
as a fallback.  A kernel may include only those and the task's own headers (handed to NVRTC in
memory): :mod:`kernel_forge.common.includes` checks the source before NVRTC runs and what NVRTC
opened after, and the log every caller gets is cut to the kernel's own lines.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernel_forge.common import includes
from kernel_forge.common.errors import CompileError, EnvironmentProblem, IncludeRefused, SignatureError
from kernel_forge.gpu import prelude
from kernel_forge.model.limits import target_arch
from kernel_forge.model.signature import as_compiled

PROGRAM_NAME = "kernel.cu"
_ERROR_LINE = re.compile(r"^(.*?)\((\d+)\): (?:catastrophic )?(error|warning)[^:]*: (.*)$", re.M)
#: changes whenever what a cached entry may hold changes (v2: logs cut to the kernel's own lines)
_CACHE_FORMAT = "includes-v1"
#: the folder the program is named in: one that can never exist (below the null device), so NVRTC
#: finds nothing beside the kernel and never looks in the working folder (".env"); the same for
#: every compile, so CUBINs (whose line info holds the name) stay the same from run to run
HOME = os.path.join(os.devnull, "kforge")
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
    crt = _crt_dir(dirs)
    if crt and crt not in dirs:
        dirs.append(crt)
    return dirs


def _crt_dir(dirs: list[str]) -> str | None:
    """A folder holding ``crt/`` (CUDA 13's mma.h, math headers and others include ``crt/...``)
    when none of ``dirs`` does: an environment whose cudart wheel came without the crt wheel
    (a framework's own venv) still compiles wmma kernels with a toolkit's crt of the same
    folder tree (the cccl folder's parent) or of $CUDA_HOME.  None when one of ``dirs`` has it."""
    if any(os.path.isdir(os.path.join(d, "crt")) for d in dirs):
        return None
    homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    candidates = [os.path.dirname(d.rstrip(os.sep)) for d in dirs] + [os.path.join(h, "include") for h in homes if h]
    for c in candidates:
        if os.path.isfile(os.path.join(c, "crt", "mma.h")):
            return c
    return None


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
    opts = [f"--gpu-architecture={target_arch(arch)}", "--std=c++17", "--ptxas-options=-v", prelude.OPTION]
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


def error_lines(log: str, file_label: str | None = None) -> list[tuple[int, str]]:
    """(kernel line, message) for every error NVRTC reported (in ``file_label`` only, when given)."""
    return [(int(m.group(2)), m.group(4)) for m in _ERROR_LINE.finditer(log)
            if m.group(3) == "error" and (file_label is None or m.group(1) == file_label)]


@functools.lru_cache(maxsize=16)
def source_digest(source: str) -> str:
    """sha256 of a kernel's source, made once per source: the settings of one kernel (a dispatch
    rule's lines, a tuner's settings) are compiled from the same text, and hashing it again for
    each made compiling N settings of an N-line rule take time growing as N squared."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _cache_key(source: str, options: tuple[str, ...], version: str, headers: Mapping[str, str] | None = None) -> str:
    portable = [o for o in options if not o.startswith("--include-path=")]
    h = hashlib.sha256()
    h.update(json.dumps([source_digest(source), portable, version, sorted((headers or {}).items()),
                         _CACHE_FORMAT]).encode())
    return h.hexdigest()


def with_library_headers(source: str, headers: Mapping[str, str] | None = None) -> dict[str, str]:
    """``headers`` (the task's own), and the kernel library's shared headers (``kforge/<file>``:
    :func:`kernel_forge.kernels.library.headers`) when the kernel or one of those names one: NVRTC
    gets them in memory, like the task's, and the include checks allow them by name."""
    headers = dict(headers or {})
    if any("kforge/" in text for text in (source, *headers.values())):
        from kernel_forge.kernels.library import headers as library_headers

        headers = {**library_headers(), **headers}
    return headers


def compile_headers(source: str, headers: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every in-memory header of one compile: :func:`with_library_headers`, and the stand-ins for the
    C and C++ standard headers NVRTC lacks (``<stdint.h>``, ``<cmath>`` ...: :data:`prelude.HOST_HEADERS`)."""
    return {**prelude.shims(tuple(include_dirs())), **with_library_headers(source, headers)}


def check_includes(source: str, *, file_label: str = PROGRAM_NAME, headers: Mapping[str, str] | None = None,
                   defines: dict | None = None) -> includes.Allowed:
    """Refuse (:class:`IncludeRefused`, naming the line) a kernel whose text could make NVRTC
    open a file outside the allow-list; the allow-list for the compile."""
    headers = compile_headers(source, headers)
    allowed = includes.Allowed.of(include_dirs(), [*headers, prelude.NAME])
    for label, text, names in [(file_label, source, tuple(defines or ())),
                               *((name, body, ()) for name, body in sorted(headers.items()))]:
        found = includes.check_source(text, allowed, defines=names)
        if found:
            first = found[0]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise IncludeRefused(f"{label}: {first}{more}", log="",
                                 lines=tuple(r.line for r in found if r.line and label == file_label))
    return allowed


@functools.cache
def _trace_supported() -> list[bool]:
    return [True]      # set to False once NVRTC refuses --fdevice-time-trace (then the checks before suffice)


def _refuse_opened(refused: list[str], file_label: str) -> IncludeRefused:
    return IncludeRefused(
        f"{file_label}: NVRTC opened {', '.join(refused[:3])}{' and more' if len(refused) > 3 else ''}, outside "
        f"the allowed headers; {includes.ALLOWED}", log="")


def compile_source(source: str, *, arch: str, defines: dict | None = None,
                   extra_options: tuple[str, ...] = (), use_cache: bool = True,
                   file_label: str = PROGRAM_NAME, headers: Mapping[str, str] | None = None) -> CompileResult:
    """Compile ``source`` to CUBIN for ``arch`` (e.g. "sm_90"). Raise :class:`CompileError`
    with NVRTC's log (cut to the kernel's own lines) and the kernel lines it names on failure;
    :class:`IncludeRefused` for an include outside the allow-list.  ``headers``: the task's own
    headers, name → text, that the kernel may include by name."""
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise CompileError(f"arch must look like sm_90 (got {arch!r}); NVRTC is asked for CUBIN, "
                           "never PTX, so the result loads on drivers older than NVRTC")
    headers = compile_headers(source, headers)
    allowed = check_includes(source, file_label=file_label, headers=headers, defines=defines)
    nvrtc = _nvrtc()
    version = nvrtc_version()
    options = build_options(arch, defines, extra_options)
    key = _cache_key(source, options, version, headers)
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
    outputs, log = _run(source, options, file_label, headers, allowed, ("CUBIN", "PTX"))
    cubin = outputs["CUBIN"]
    ptx = outputs["PTX"].rstrip(b"\x00").decode(errors="replace")
    seconds = time.perf_counter() - t0
    result = CompileResult(cubin, log, arch, options, version, seconds, False, parse_resources(log), ptx)
    if use_cache:
        _store(cdir, cubin_path, meta_path, result)
    return result


def compile_ptx(source: str, *, arch: str, defines: dict | None = None, file_label: str = PROGRAM_NAME,
                headers: Mapping[str, str] | None = None) -> str:
    """The PTX NVRTC produces for ``source`` with the options the gate compiles with (the same
    include checks and cut log as :func:`compile_source`; not cached)."""
    headers = compile_headers(source, headers)
    allowed = check_includes(source, file_label=file_label, headers=headers, defines=defines)
    outputs, _log = _run(source, build_options(arch, defines), file_label, headers, allowed, ("PTX",))
    return outputs["PTX"].rstrip(b"\x00").decode(errors="replace")


def _run(source: str, options: tuple[str, ...], file_label: str, headers: dict[str, str],
         allowed: includes.Allowed, wants: tuple[str, ...]) -> tuple[dict[str, bytes], str]:
    """NVRTC once: ({"CUBIN": ..., "PTX": ...} as ``wants`` asks, the log cut to the kernel's own lines).  The one place a
    log is read from NVRTC: a file it opened outside the allow-list refuses the compile, whatever
    the outcome, and nothing of its log or output is kept."""
    nvrtc = _nvrtc()
    headers = {**headers, prelude.NAME: prelude.PRELUDE}    # the prelude, pre-included (build_options)
    names = sorted(headers)
    written = source                 # what the user wrote: the lines a compile error shows
    try:
        source = as_compiled(source)     # a kernel of C++ linkage, or a template's instance, found by its name
    except SignatureError as exc:        # an instance line that does not fit its template: the file and line
        raise CompileError(f"{file_label}: {exc.message}", log="", hint=exc.hint) from None
    with tempfile.TemporaryDirectory(prefix="kforge-trace-") as trace_dir:
        prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), os.path.join(HOME, file_label).encode(), len(names),
                                               [headers[n].encode() for n in names], [n.encode() for n in names]),
                      "nvrtcCreateProgram")
        try:
            err, log = _compile(nvrtc, prog, options, trace_dir)
            log = log.replace(HOME + os.sep, "")          # messages name the kernel by its own label
            opened = includes.opened_files(trace_dir) if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else None
            return _outcome(nvrtc, prog, err, log, opened, written, file_label, allowed, wants)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)


def _outcome(nvrtc, prog, err, log: str, opened: list[str] | None, source: str, file_label: str,
             allowed: includes.Allowed, wants: tuple[str, ...]) -> tuple[dict[str, bytes], str]:
    """Refuse what NVRTC opened outside the allow-list; else the output and the cut log (a failure
    raises :class:`CompileError` naming the kernel's first error line)."""
    # what NVRTC opened: its own record after a compile, the files its messages name after a failure
    refused = includes.refused_opened(opened if opened is not None else includes.log_files(log),
                                      allowed, file_label)
    if refused:
        raise _refuse_opened(refused, file_label)
    log = includes.cut_log(log, file_label, allowed)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        lines = error_lines(log, file_label)
        elsewhere = [ln for ln in log.splitlines() if _ERROR_LINE.match(ln) and " error" in ln]
        if not lines and elsewhere:      # an error inside a header, reached from a kernel line
            at = re.search(rf'at line (\d+) of "?{re.escape(file_label)}"?$', log, re.M)
            lines = [(int(at.group(1)), elsewhere[0])] if at else []
        first = (f"line {lines[0][0]}: {lines[0][1]}" if lines else elsewhere[0] if elsewhere
                 else (log.strip().splitlines()[-1:] or ["(no log)"])[0])
        src_lines = source.splitlines()
        shown = ""
        if lines and 0 < lines[0][0] <= len(src_lines):
            shown = f"\n    {lines[0][0]:4d} | {src_lines[lines[0][0] - 1]}"
        raise CompileError(f"{file_label}: NVRTC could not compile it: {first}{shown}",
                           log=log, lines=tuple(n for n, _ in lines), hint=prelude.hint_for(log))
    outputs = {}
    for want in wants:                   # "CUBIN", "PTX": nvrtcGetCUBINSize / nvrtcGetCUBIN, ...
        size = _check(getattr(nvrtc, f"nvrtcGet{want}Size")(prog), f"nvrtcGet{want}Size")
        out = bytearray(max(int(size), 1))   # never b" " * n: see GPU-NOTES
        _check(getattr(nvrtc, f"nvrtcGet{want}")(prog, out), f"nvrtcGet{want}")
        outputs[want] = bytes(out[:int(size)])
    return outputs, log


def _compile(nvrtc, prog, options: tuple[str, ...], trace_dir: str):
    """Run NVRTC once, asking it to record the headers it opens in ``trace_dir``; (status, log)."""
    supported = _trace_supported()
    traced = options + ((f"--fdevice-time-trace={os.path.join(trace_dir, 'trace')}",) if supported[0] else ())
    err, = nvrtc.nvrtcCompileProgram(prog, len(traced), [o.encode() for o in traced])
    if err == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION and supported[0] and "time-trace" in _log(nvrtc, prog):
        supported[0] = False        # an NVRTC without the option: the checks before the compile stand alone
        err, = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
    return err, _log(nvrtc, prog)


def _log(nvrtc, prog) -> str:
    log_size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = bytearray(max(int(log_size), 1))  # never b" " * n: see GPU-NOTES
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return bytes(buf).rstrip(b"\x00").decode(errors="replace")


def _store(cdir: Path, cubin_path: Path, meta_path: Path, result: CompileResult) -> None:
    from kernel_forge.common.writes import WriteFailed, write_files

    try:
        write_files([(cubin_path, result.cubin),
                     (meta_path, json.dumps({"log": result.log, "resources": result.resources,
                                             "ptx": result.ptx}).encode())])
    except (WriteFailed, OSError):
        pass  # the cache is an optimisation; a read-only home or a full disk must not fail a compile
