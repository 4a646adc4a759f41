"""``--sanitize``: run a candidate under NVIDIA compute-sanitizer before it can be accepted.

The candidate's CUBIN (the one the gate compiled and ran) runs one checked launch of the task's
smallest correctness case in a child process (:mod:`kernel_forge.gpu.sanitize_child`) started by
``compute-sanitizer`` (memcheck always; racecheck when the kernel uses shared
memory; synccheck when it uses barriers; initcheck always).  CuPy's memory pool is turned off
in the child so out-of-bounds accesses are not hidden inside a larger pooled allocation.  A
finding rejects the candidate with the tool's own message.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernel_forge.common.errors import EnvironmentProblem
from kernel_forge.common.writes import write_file, write_text
from kernel_forge.model.verdict import Evaluation
from kernel_forge.model.worker_protocol import KernelSpec, resolve_launch

FLAGS = ["--report-api-errors", "no", "--error-exitcode", "99", "--print-limit", "20"]


def find_sanitizer() -> str:
    exe = shutil.which("compute-sanitizer")
    if exe:
        return exe
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cand = Path(root) / "bin" / ("compute-sanitizer.bat" if os.name == "nt" else "compute-sanitizer")
            if cand.is_file():
                return str(cand)
    raise EnvironmentProblem(
        "--sanitize needs NVIDIA compute-sanitizer, which is not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin",
        hint="install the CUDA toolkit (compute-sanitizer ships with it), or run without --sanitize")


def tools_for(source: str) -> list[str]:
    tools = ["memcheck"]
    if "__shared__" in source or "extern __shared__" in source:
        tools.append("racecheck")
    if any(s in source for s in ("__syncthreads", "__syncwarp", "sync(", "__shfl")):
        tools.append("synccheck")
    tools.append("initcheck")
    return tools


@dataclass
class SanitizerResult:
    tool: str
    ok: bool
    message: str
    seconds: float


def smallest_case(task):
    from kernel_forge.model.weak_cases import case_size

    cases = task.cases_with("correctness") or task.cases_with("performance")
    return min(cases, key=lambda c: case_size(task, c))


def run_sanitizer(task, candidate, spec: KernelSpec, *, seed: int = 0, timeout_s: float = 300.0,
                  tools: list[str] | None = None) -> list[SanitizerResult]:
    """Run each tool on the candidate's compiled ``spec`` (the CUBIN the gate ran); returns one
    result per tool (stops at the first finding)."""
    import time

    exe = find_sanitizer()
    case = smallest_case(task)
    launch = resolve_launch(spec.launch, case.vars, spec.defines)
    results = []
    with tempfile.TemporaryDirectory(prefix="kforge-sanitize-") as tmp:
        job = Path(tmp) / "job.json"
        cubin = Path(tmp) / "candidate.cubin"
        write_file(cubin, spec.cubin)
        write_text(job, json.dumps({"manifest": str(task.path), "cubin": str(cubin), "entry": spec.entry,
                                   "label": spec.label, "launch": launch.to_json(), "case": case.name,
                                   "seed": seed}))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
        for tool in tools or tools_for(candidate.source):
            cmd = [exe, "--tool", tool, *FLAGS, sys.executable, "-m", "kernel_forge.gpu.sanitize_child", str(job)]
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
            except subprocess.TimeoutExpired:
                results.append(SanitizerResult(tool, False, f"{tool} did not finish in {timeout_s:.0f} s",
                                               time.perf_counter() - t0))
                break
            out = (proc.stdout or "") + (proc.stderr or "")
            findings = [l for l in out.splitlines() if l.startswith("=========") and
                        ("Error" in l or "error" in l or "Race" in l or "Hazard" in l or "Invalid" in l or
                         "Uninitialized" in l or "Barrier" in l)]
            ok = proc.returncode == 0
            if proc.returncode not in (0, 99):
                msg = f"{tool}: the sanitized run exited {proc.returncode}: " + "\n".join(out.strip().splitlines()[-6:])
            else:
                msg = "\n".join(findings[:8]) if not ok else f"{tool}: no findings"
            results.append(SanitizerResult(tool, ok, msg, time.perf_counter() - t0))
            if not ok:
                break
    return results


def sanitize(task, candidate, spec: KernelSpec, ev: Evaluation, *, seed: int = 0) -> None:
    """``--sanitize`` on a candidate that passed: the tools' results in ``ev.compile["sanitizer"]``,
    and the first finding fails it (reason ``sanitizer``)."""
    results = run_sanitizer(task, candidate, spec, seed=seed)
    ev.compile = dict(ev.compile or {})
    ev.compile["sanitizer"] = [{"tool": r.tool, "ok": r.ok, "message": r.message, "seconds": round(r.seconds, 2)}
                               for r in results]
    bad = [r for r in results if not r.ok]
    if bad:
        ev.passed, ev.reason = False, "sanitizer"
        ev.message = f"compute-sanitizer {bad[0].tool}: {bad[0].message}"
        ev.score_us = None
