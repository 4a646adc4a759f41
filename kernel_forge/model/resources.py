"""What a compiled kernel uses for one launch, and the occupancy that allows (``CaseResult.resources``).

``blocks_per_sm`` is the driver's answer (cuOccupancyMaxActiveBlocksPerMultiprocessor, asked by
the worker for this very launch); the limiter is the resource that allows the fewest blocks,
worked out from the per-SM limits with the allocation rules of the CUDA occupancy calculator
(registers in units of 256 per warp, shared memory with the per-block reservation).
"""
from __future__ import annotations

from kernel_forge.model.worker_protocol import ModuleFacts, ResolvedLaunch

#: registers are allocated per warp in units of this many (sm_50 and later)
REG_UNIT = 256


def limits(facts: ModuleFacts, launch: ResolvedLaunch) -> dict[str, int]:
    """Blocks per SM each resource allows on its own (resources not in use are left out)."""
    sm = facts.sm
    warps = -(-launch.threads // 32)
    out: dict[str, int] = {}
    if sm.get("max_threads"):
        out["threads"] = sm["max_threads"] // (warps * 32) if warps else 0
    if sm.get("max_blocks"):
        out["blocks"] = sm["max_blocks"]
    if facts.registers and sm.get("registers") and warps:
        per_warp = -(-facts.registers * 32 // REG_UNIT) * REG_UNIT
        out["registers"] = (sm["registers"] // per_warp) // warps
    smem = facts.static_smem + launch.shared_mem
    if smem and sm.get("shared_memory"):
        out["shared_memory"] = sm["shared_memory"] // (smem + sm.get("reserved_smem", 0))
    return out


def case_resources(facts: ModuleFacts | None, launch: ResolvedLaunch | None,
                   compiled: dict | None = None) -> dict | None:
    """``CaseResult.resources`` for one case, or None for Python baselines or unresolved launches.
    ``compiled`` is the NVRTC log's figures (``CompileResult.resources``: spills)."""
    if facts is None or launch is None:
        return None
    compiled = compiled or {}
    blocks = facts.occupancy.get((launch.threads, launch.shared_mem))
    warps_per_block = -(-launch.threads // 32)
    max_warps = facts.sm.get("max_threads", 0) // 32
    by = limits(facts, launch)
    # on a tie the hardware's own limits (threads, blocks) are named: nothing the kernel changes frees them
    limiter = min(by, key=lambda k: (by[k], ("threads", "blocks", "registers", "shared_memory").index(k))) if by else None
    warps = blocks * warps_per_block if blocks is not None else None
    return {
        "registers": facts.registers,
        "spill_stores": compiled.get("spill_stores", 0),
        "spill_loads": compiled.get("spill_loads", 0),
        "static_smem": facts.static_smem,
        "dynamic_smem": launch.shared_mem,
        "local_bytes": facts.local_bytes,
        "threads_per_block": launch.threads,
        "blocks_per_sm": blocks,
        "warps_per_sm": warps,
        "occupancy": round(warps / max_warps, 4) if warps is not None and max_warps else None,
        "occupancy_limiter": limiter,
    }
