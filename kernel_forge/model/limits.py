"""Launch limits known without a GPU: what every supported NVIDIA GPU allows, and per arch.

``kforge validate``, ``eval`` and ``optimize`` check every launch a kernel can make against these
before any GPU work (:func:`kernel_forge.gate.preflight.check_launch`); the gate checks the real GPU's
limits, and the kernel's own (registers, ``__launch_bounds__``), again before each launch.
"""
from __future__ import annotations

import math
import re

#: limits that hold on every NVIDIA GPU kforge supports (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability", compute capability 7.0 and later)
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)


def arch_cc(arch: str) -> tuple[int, int]:
    """``sm_90a`` -> (9, 0), ``sm_120`` -> (12, 0)."""
    digits = re.fullmatch(r"sm_(\d+)[af]?", arch).group(1)
    return int(digits[:-1]), int(digits[-1])


#: GPUs whose CUBIN is built for the arch-specific target (``sm_90`` -> ``sm_90a``): the same
#: machine code, which loads on no other compute capability either way, plus the instructions only
#: that chip has (Hopper's ``wgmma.mma_async`` and ``setmaxnreg``).  Later majors are left alone:
#: their plain CUBIN also loads on the family's other minors, their ``a`` CUBIN would not.
FEATURE_TARGETS = {"sm_90": "sm_90a"}


def target_arch(arch: str) -> str:
    """The ``--gpu-architecture`` NVRTC is given for a GPU of ``arch``."""
    return FEATURE_TARGETS.get(arch, arch)


#: a kernel that stops itself with #error unless compiled for a feature target (`#if ...
#: !defined(__CUDA_ARCH_FEAT_SM90_ALL)`): the target it needs
_FEATURE_GUARD = re.compile(r"^[ \t]*#[ \t]*if\b[^\n]*!\s*defined\s*\(\s*__CUDA_ARCH_FEAT_(SM\d+)_ALL\s*\)", re.M)


def needed_target(source: str) -> str | None:
    """The feature target (``sm_90a``) a kernel refuses to compile without, or None."""
    m = _FEATURE_GUARD.search(source)
    return "sm_" + m.group(1)[2:] + "a" if m else None


def launch_limits(arch: str | None = None, device: dict | None = None) -> dict:
    """The launch limits a kernel is checked against before the GPU: a device description's
    (``--device FILE``), else the arch's (``--arch``), else the most any supported GPU allows (so
    only what cannot run anywhere is refused; the gate checks the real GPU's limits again)."""
    from kernel_forge.model.limits import _ARCH, arch_limits

    if device:
        return {"label": device.get("name") or "the described GPU",
                "max_threads_per_block": int(device.get("max_threads_per_block", MAX_THREADS_PER_BLOCK)),
                "max_block": tuple(device.get("max_block", MAX_BLOCK)), "max_grid": tuple(device.get("max_grid", MAX_GRID)),
                "max_smem_per_block_optin": int(device["max_smem_per_block_optin"])}
    if arch:
        lim = arch_limits(arch_cc(arch))
        optin, label = lim["max_smem_per_sm"] - lim["reserved_smem_per_block"], arch
    else:
        optin, label = max(smem - reserved for smem, reserved, *_ in _ARCH.values()), "any supported GPU"
    return {"label": label, "max_threads_per_block": MAX_THREADS_PER_BLOCK, "max_block": MAX_BLOCK,
            "max_grid": MAX_GRID, "max_smem_per_block_optin": optin}


def launch_problem(grid, block, smem: int, limits: dict) -> str | None:
    """What is wrong with one resolved launch (None: nothing), in words."""
    grid, block = tuple(grid), tuple(block)
    if min(grid) < 1 or min(block) < 1:
        return f"grid {list(grid)} and block {list(block)} need every dimension >= 1"
    threads = math.prod(block)
    if threads > limits["max_threads_per_block"]:
        return (f"block {list(block)} has {threads} threads; a block holds at most {limits['max_threads_per_block']} "
                f"({limits['label']})")
    for i, (b, mb) in enumerate(zip(block, limits["max_block"])):
        if b > mb:
            return f"block dimension {'xyz'[i]} = {b} exceeds {mb} ({limits['label']})"
    for i, (g, mg) in enumerate(zip(grid, limits["max_grid"])):
        if g > mg:
            return f"grid dimension {'xyz'[i]} = {g} exceeds {mg} ({limits['label']})"
    if smem < 0:
        return f"shared_mem = {smem} is negative"
    if smem > limits["max_smem_per_block_optin"]:
        return (f"shared_mem = {smem} bytes exceeds the {limits['max_smem_per_block_optin']} bytes of shared memory "
                f"a block can have ({limits['label']})")
    return None


_KB = 1024
_ARCH = {  # cc: (smem per SM, reserved per block, threads per SM, blocks per SM, fp32:fp64)
    (7, 0): (96 * _KB, 0, 2048, 32, 2), (7, 5): (64 * _KB, 0, 1024, 16, 32),
    (8, 0): (164 * _KB, _KB, 2048, 32, 2), (8, 6): (100 * _KB, _KB, 1536, 16, 64),
    (8, 7): (164 * _KB, _KB, 2048, 16, 2), (8, 9): (100 * _KB, _KB, 1536, 24, 64),
    (9, 0): (228 * _KB, _KB, 2048, 32, 2), (10, 0): (228 * _KB, _KB, 2048, 32, 2),
    (12, 0): (100 * _KB, _KB, 1536, 32, 64),
}


def arch_limits(cc: tuple[int, int]) -> dict[str, int]:
    """Per-SM limits of compute capability ``cc`` (the nearest older known arch for a newer one)."""
    known = sorted(_ARCH)
    key = tuple(cc) if tuple(cc) in _ARCH else max((k for k in known if k <= tuple(cc)), default=known[0])
    smem, reserved, threads, blocks, ratio = _ARCH[key]
    return {"max_registers_per_sm": 65536, "max_registers_per_block": 65536, "max_registers_per_thread": 255,
            "max_smem_per_sm": smem, "reserved_smem_per_block": reserved, "max_threads_per_sm": threads,
            "max_blocks_per_sm": blocks, "warp_size": 32, "const_bytes": 65536, "fp32_to_fp64_ratio": ratio}
