"""A candidate made ready for the worker: its static rules, entry point and signature, a launch
configuration, then an NVRTC compile whose code follows the compiled rules, as a
:class:`~kernel_forge.model.worker_protocol.KernelSpec`.  Every refusal raises a
:class:`~kernel_forge.common.errors.KForgeError` subclass that the gate turns into a verdict.
"""
from __future__ import annotations

from pathlib import Path

from kernel_forge.common import compiled_rules, static_rules
from kernel_forge.common.errors import CandidateError, SignatureError
from kernel_forge.gate.preflight import KernelRefused
from kernel_forge.model.candidate import Candidate
from kernel_forge.model.signature import check_matches, find_entry
from kernel_forge.model.task import Task
from kernel_forge.model.worker_protocol import KernelSpec

__all__ = ["check_candidate", "compile_candidate"]


def check_candidate(task: Task, candidate: Candidate):
    """Static rules, entry point, signature and launch, before any compile: the launch to use."""
    findings = static_rules.check(candidate.source)
    if findings:
        raise CandidateError("; ".join(str(f) for f in findings[:3]), file=candidate.name)
    found = find_entry(candidate.source, task.signature.name, task.header_sources() if task.headers else None)
    if found is None:
        raise SignatureError(f'{candidate.name}: no `__global__ void {task.signature.name}(...)` '
                             "definition found",
                             hint=f"the entry point must be: {task.signature.text}")
    sig, line = found
    try:
        check_matches(task.signature, sig)
    except SignatureError as exc:
        raise SignatureError(f"{candidate.name}:{line}: {exc.message}") from None
    launch = candidate.launch or task.launch
    if launch is None:
        raise CandidateError("no launch configuration: the manifest has no \"launch\" and the kernel no "
                             "`// kforge: grid = [...]` / `block = [...]` header", file=candidate.name)
    return launch


def compile_candidate(task: Task, candidate: Candidate, launch, arch: str) -> tuple[KernelSpec, dict]:
    """The compile for ``arch`` and the rules its code must follow: the spec and the compile record."""
    from kernel_forge.gpu.nvrtc import compile_source

    label = Path(candidate.name).name if candidate.name.endswith(".cu") else "kernel.cu"
    result = compile_source(candidate.source, arch=arch, defines=candidate.compile_defines(), file_label=label,
                            headers=task.header_sources())
    findings = compiled_rules.check(result.ptx, file_label=label)     # what the program does, however spelled
    if findings:
        raise KernelRefused("static_rule", "; ".join(str(f) for f in findings[:3]), file=candidate.name,
                            line=findings[0].line)
    spec = KernelSpec(kind="cuda", label=candidate.name, cubin=result.cubin,
                      entry=task.signature.name, launch=launch, defines=candidate.compile_defines())
    return spec, result.to_json()
