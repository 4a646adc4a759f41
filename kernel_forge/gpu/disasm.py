"""The compiled code of a candidate as text: SASS (nvdisasm on the CUBIN) or PTX (NVRTC).

:func:`sass` disassembles a CUBIN with ``nvdisasm`` -- ``$KFORGE_NVDISASM``, else the one
``cuda.pathfinder`` finds (the ``nvidia-cuda-nvdisasm`` wheel that ``cuda-toolkit[nvdisasm]``
installs, a conda or CUDA toolkit install), else ``nvdisasm`` on PATH.  :func:`ptx` asks NVRTC
for the PTX of the same compile (always available where NVRTC is).  Neither needs a GPU.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from kernel_forge.common import writes
from kernel_forge.common.errors import EnvironmentProblem


@lru_cache(maxsize=4)
def _find(explicit: str | None) -> str | None:
    if explicit:
        return explicit if Path(explicit).is_file() else None
    try:
        from cuda import pathfinder

        found = pathfinder.find_nvidia_binary_utility("nvdisasm")
        if found:
            return str(found)
    except Exception:  # noqa: BLE001 - an old cuda-pathfinder or none: PATH is the last resort
        pass
    return shutil.which("nvdisasm")


def find_nvdisasm() -> str | None:
    """The nvdisasm to use, or None (see the module docstring for the search order)."""
    return _find(os.environ.get("KFORGE_NVDISASM") or None)


def nvdisasm_version(path: str) -> str:
    """``13.5.37``-like, from ``nvdisasm --version`` ("" when it says nothing recognisable)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for token in out.replace(",", " ").split():
        if token.startswith("V") and token[1:2].isdigit():
            return token[1:]
    return ""


def sass(cubin: bytes, nvdisasm: str | None = None, timeout_s: float = 60.0) -> str:
    """The SASS of ``cubin`` (``nvdisasm -c``: code sections only).  Raises
    :class:`EnvironmentProblem` when there is no nvdisasm or it fails."""
    tool = nvdisasm or find_nvdisasm()
    if not tool:
        raise EnvironmentProblem("nvdisasm was not found",
                                 hint='pip install "cuda-toolkit[nvdisasm]" (or set KFORGE_NVDISASM)')
    with tempfile.TemporaryDirectory(prefix="kforge-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        writes.write_file(path, cubin)
        try:
            p = subprocess.run([tool, "-c", str(path)], capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentProblem(f"nvdisasm could not run: {exc}") from None
    if p.returncode != 0:
        raise EnvironmentProblem(f"nvdisasm failed (status {p.returncode}): {(p.stderr or p.stdout).strip()[:300]}")
    return p.stdout


def ptx(source: str, *, arch: str, defines: dict | None = None, file_label: str = "kernel.cu",
        headers: dict[str, str] | None = None) -> str:
    """The PTX NVRTC produces for ``source`` with the options the gate compiles with.  Raises
    :class:`CompileError` when it does not compile."""
    from kernel_forge.gpu.nvrtc import compile_ptx

    return compile_ptx(source, arch=arch, defines=defines, file_label=file_label, headers=headers)
