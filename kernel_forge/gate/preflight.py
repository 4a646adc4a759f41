"""Checks of a kernel and a task that need no GPU, run before the GPU probe.

A mistake that can be seen without a GPU must never cost a GPU probe, a worker start or a run
folder: a kernel's static rules, entry point, signature and launch, an NVRTC compile where the
arch is known, and whether each case's buffers fit the GPU and the host.  (Option values are
checked by the settings' one validator, :mod:`kernel_forge.config.build`.)  Every check raises an
:class:`~kernel_forge.common.errors.InputError` (or a subclass) that names the option, the file and
JSON path, or the kernel line.
"""
from __future__ import annotations

import os
from pathlib import Path

from kernel_forge.model import dispatch
from kernel_forge.common import compiled_rules, static_rules
from kernel_forge.model.candidate import Candidate
from kernel_forge.common.errors import CandidateError, CompileError, ManifestError, SignatureError
from kernel_forge.common.json_path import json_path
from kernel_forge.model.signature import check_matches, find_entry
from kernel_forge.model.limits import launch_limits, launch_problem
from kernel_forge.model.task import Task

#: GPU memory assumed when no device is known (the smallest of the common data-centre GPUs)
DEFAULT_GPU_MEMORY = 80 * 2**30
#: the arch ``kforge validate`` compiles for when none is given
DEFAULT_ARCH = "sm_90"
#: host bytes needed per buffer byte: the parent's draw, the reference's copy, the worker's draw
HOST_FACTOR = 3
#: GPU bytes needed per buffer byte, plus one more per output byte (the kept reference copy)
GPU_FACTOR = 1


class KernelRefused(CandidateError):
    """A kernel that cannot be run, found before the GPU: ``reason`` is its verdict reason code
    (``static_rule``, ``signature_mismatch``, ``bad_candidate``, ``compile_error``)."""

    def __init__(self, reason: str, message: str, *, file: str | None = None, line: int | None = None,
                 hint: str | None = None):
        self.reason = reason
        super().__init__(message, file=file, line=line, hint=hint)


# -------------------------------------------------------------------------------- option values

def check_static(source: str, *, file: str) -> None:
    """The static rules (vendor libraries, path includes, timers, ...): refused with the line."""
    findings = static_rules.check(source)
    if findings:
        first = findings[0]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise KernelRefused("static_rule", f"{first.message} ({first.rule}): {first.text.strip()}{more}",
                            file=file, line=first.line)


def check_compiled(result, *, file: str) -> None:
    """The compiled-code rules (:mod:`~kernel_forge.common.compiled_rules`) on the PTX of ``result``
    (a :class:`~kernel_forge.gpu.nvrtc.CompileResult`): a device heap allocation, a device-side
    launch, a timer read or printf, however the source spelled it, refused with the line."""
    findings = compiled_rules.check(getattr(result, "ptx", "") or "", file_label=Path(file).name)
    if findings:
        first = findings[0]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise KernelRefused("static_rule", f"{first.message} ({first.rule}){more}", file=file, line=first.line)


def check_kernel(task: Task, cand: Candidate, *, file: str | None = None, limits: dict | None = None) -> int:
    """Static rules, the entry point, its signature and a launch for ``cand`` as a kernel of
    ``task`` (every setting of its tunables on every case, within ``limits``: see
    :func:`check_launch`); returns the entry point's line."""
    file = file or cand.name
    check_static(cand.source, file=file)
    found = find_entry(cand.source, task.signature.name, task.header_sources() if task.headers else None)
    if found is None:
        raise KernelRefused("signature_mismatch",
                            f'no `__global__ void {task.signature.name}(...)` definition found',
                            file=file, hint=f"the entry point must be: {task.signature.text}")
    sig, line = found
    try:
        check_matches(task.signature, sig)
    except SignatureError as exc:
        raise KernelRefused("signature_mismatch", exc.message, file=file, line=line) from None
    if cand.launch is None and task.launch is None:
        raise KernelRefused("bad_candidate", 'no launch configuration: the manifest has no "launch" and the kernel '
                            "no `// kforge: grid = [...]` / `block = [...]` header", file=file)
    if cand.tunables and cand.count_configurations() == 0:
        raise KernelRefused("bad_candidate", "no setting of its tunables satisfies its constraints", file=file)
    found = dispatch.problem(task, cand.dispatch)    # a dispatch rule: case variables only, every line used
    if found is not None:
        raise KernelRefused("bad_candidate", found[0], file=file, line=found[1])
    check_launch(task, cand, limits, file=file)
    return line


#: settings of a kernel's tunables whose launch is checked (each tunable's every value is among them)
LAUNCH_SETTINGS = 2048


def _launch_settings(cand: Candidate, used: set[str]) -> list[dict]:
    """The settings of ``cand``'s tunables that differ in what the launch reads (``used``): all of
    them for a small space, else a sample that holds every value of every tunable."""
    if not cand.tunables or not (used & set(cand.tunables)):
        return [dict(cand.defines)]
    if int(cand.count_configurations()) <= LAUNCH_SETTINGS:
        settings = cand.configurations()
    else:
        must = [{k: v} for k in sorted(cand.tunables) for v in cand.tunables[k]]
        settings = cand.sample_configurations(LAUNCH_SETTINGS, seed=0, must=must)
    seen, out = set(), []
    for d in settings:
        key = tuple(sorted((k, v) for k, v in d.items() if k in used))
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def check_launch(task: Task, cand: Candidate, limits: dict | None = None, *, file: str | None = None) -> None:
    """Every launch ``cand`` can make: each setting of its tunables (that its constraints allow)
    on each case resolves to whole numbers within ``limits`` (:func:`launch_limits`; default: what
    any supported GPU allows).  Refused with the header line, the case and the setting."""
    from kernel_forge.common import expressions
    from kernel_forge.common.errors import ExpressionError
    from kernel_forge.model.worker_protocol import resolve_launch

    file = file or cand.name
    launch = cand.launch or task.launch
    if launch is None:
        return
    limits = limits or launch_limits()
    exprs = [*launch.grid, *launch.block, launch.shared_mem]
    used: set[str] = set()
    for e in exprs:
        try:
            used |= expressions.names(e)
        except ExpressionError:
            pass
    line = _header_line(cand.source, ("block", "grid", "shared_mem")) if cand.launch is not None else None
    where = "its kforge header" if cand.launch is not None else f"the launch of {task.path.name}"
    for setting in _launch_settings(cand, used):
        shown = {k: v for k, v in setting.items() if k in used and k in cand.tunables}
        with_ = f" with {', '.join(f'{k}={v}' for k, v in sorted(shown.items()))}" if shown else ""
        for case in task.cases:
            try:
                r = resolve_launch(launch, case.vars, setting)
            except ExpressionError as exc:
                raise KernelRefused("launch_config", f"the launch of {where} does not evaluate on case {case.name!r}"
                                    f"{with_}: {exc.message.splitlines()[0]}", file=file, line=line) from None
            problem = launch_problem(r.grid, r.block, r.shared_mem, limits)
            if problem:
                hint = ("exclude the settings that cannot run with `// kforge: constraint ...` or drop those tune "
                        "values" if shown else None)
                raise KernelRefused("launch_config", f"the launch cannot run on case {case.name!r}{with_}: {problem}",
                                    file=file, line=line, hint=hint)


def _header_line(source: str, keys: tuple[str, ...]) -> int | None:
    for lineno, text in enumerate(source.splitlines(), start=1):
        t = text.strip()
        if t.startswith("//") and "kforge:" in t and t.split("kforge:", 1)[1].strip().startswith(keys):
            return lineno
    return None


def check_task_kernels(task: Task, limits: dict | None = None) -> None:
    """:func:`check_kernel` on the task's initial kernel and templates (what a run starts from),
    refused as the manifest's error at ``$.initial`` / ``$.templates[i]``."""
    from kernel_forge.model.candidate import load_candidate

    starts = [(task.initial, "$.initial")] if task.initial is not None else []   # a task may have no initial
    for path, jp in [*starts, *((t, json_path("templates", i)) for i, t in enumerate(task.templates))]:
        try:
            check_kernel(task, load_candidate(path), file=str(path), limits=limits)
        except KernelRefused as exc:
            raise ManifestError(exc.message, file=str(task.path), json_path=jp, hint=exc.hint) from None


def distinct_settings(rule) -> list:
    """The branches of a dispatch rule with a setting no earlier branch has, in order, the
    default's setting last: each is compiled once, however many lines share it."""
    seen, out = set(), []
    default = rule.branches[-1]
    key = lambda b: tuple(sorted(b.defines.items()))  # noqa: E731
    for b in rule.branches[:-1]:
        if key(b) not in seen and key(b) != key(default):
            seen.add(key(b))
            out.append(b)
    return out + [default]


def compile_kernel(cand: Candidate, arch: str, *, file: str | None = None, defines: dict | None = None,
                   headers: dict[str, str] | None = None):
    """Static rules, then NVRTC for ``arch``, then the compiled-code rules on its PTX: the
    CompileResult.  Nothing reaches NVRTC that the static rules refuse (an include of an absolute
    or parent-relative path, say), and NVRTC reads no file outside the include allow-list (the
    toolkit's headers and the task's ``headers``, name → text)."""
    from kernel_forge.gpu.nvrtc import compile_source

    file = file or cand.name
    check_static(cand.source, file=file)
    if defines is None and cand.dispatch is not None:     # a dispatch rule: every setting compiles
        result = None
        for branch in distinct_settings(cand.dispatch):      # the default's last: its result is returned
            try:
                result = compile_source(cand.source, arch=arch, defines=dict(sorted(branch.defines.items())),
                                        file_label=Path(file).name, headers=headers)
            except CompileError as exc:
                where = f"{file}:{branch.line}: " if branch.line else f"{file}: "
                raise CompileError(f"{where}the setting of dispatch line `{branch.condition} -> "
                                   f"{branch.setting_text()}` does not compile: {exc.message}",
                                   log=exc.log, lines=exc.lines) from None
            check_compiled(result, file=file)
        return result
    d = cand.compile_defines() if defines is None else defines
    result = compile_source(cand.source, arch=arch, defines=d, file_label=Path(file).name, headers=headers)
    check_compiled(result, file=file)
    return result


def nvrtc_available() -> str | None:
    """None when NVRTC can be used here, else why not."""
    try:
        from kernel_forge.gpu.nvrtc import nvrtc_version
        nvrtc_version()
    except Exception as exc:  # noqa: BLE001 - any reason is reported, none is fatal
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


# -------------------------------------------------------------------------------- sizes

def host_memory() -> int | None:
    """Physical memory of this host in bytes (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    try:  # Windows
        import ctypes

        class _Status(ctypes.Structure):
            _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                        ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                        ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                        ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                        ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]
        st = _Status()
        st.dwLength = ctypes.sizeof(_Status)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(st)):  # type: ignore[attr-defined]
            return int(st.ullTotalPhys)
    except Exception:  # noqa: BLE001
        pass
    return None


def gib(n: float) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    if n >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.1f} KiB" if n >= 2**10 else f"{int(n)} B"


def case_needs(task: Task, case) -> tuple[int, int]:
    """(GPU bytes, host bytes) one case needs, estimated from its shapes and dtypes."""
    per = task.buffer_bytes(case)
    total = sum(per.values())
    outputs = sum(per[a.name] for a in task.outputs)
    return GPU_FACTOR * total + outputs, HOST_FACTOR * total


def check_sizes(task: Task, *, gpu_bytes: int | None = DEFAULT_GPU_MEMORY, host_bytes: int | None = None,
                gpu_label: str = "") -> None:
    """Refuse a case whose buffers will not fit the GPU (``gpu_bytes``; None: not checked) or
    this host (``host_bytes``, default: its physical memory), naming the case and its size."""
    host_bytes = host_memory() if host_bytes is None else host_bytes
    for case in task.cases:
        per = task.buffer_bytes(case)
        gpu_need, host_need = case_needs(task, case)
        largest = ", ".join(f"{k} {gib(v)}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:3])
        where = json_path("cases", case.index)
        if gpu_bytes is not None and gpu_need > gpu_bytes:
            raise ManifestError(f"case {case.name!r} needs about {gib(gpu_need)} of GPU memory (buffers: {largest}), "
                                f"more than the {gib(gpu_bytes)} {gpu_label or 'assumed'} GPU",
                                file=str(task.path), json_path=where,
                                hint="make the case smaller, or give the GPU's memory (kforge validate --gpu-memory GIB)")
        if host_bytes and host_need > host_bytes:
            raise ManifestError(f"case {case.name!r} needs about {gib(host_need)} of host memory to draw and check its "
                                f"inputs (buffers: {largest}), more than this host's {gib(host_bytes)}",
                                file=str(task.path), json_path=where, hint="make the case smaller")


def fits_host(task: Task, case, host_bytes: int | None = None) -> bool:
    host_bytes = host_memory() if host_bytes is None else host_bytes
    return not host_bytes or case_needs(task, case)[1] <= host_bytes // 2


#: how an earlier output of each kind starts (after white space): an existing file is replaced
#: only when it is one, so a mistyped path never overwrites a source file or someone's notes
