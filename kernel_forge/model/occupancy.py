"""How many blocks of a kernel fit on one SM: a pure-Python occupancy calculator.

It follows the rules NVIDIA publishes for its occupancy calculator (CUDA C++ Programming Guide,
"Multiprocessor Level"; the CUDA Occupancy Calculator): registers are allocated per warp in
units of 256 and split over the SM's four register-file partitions, shared memory is allocated
per block in units of 128 bytes (256 before sm_80) plus the bytes the system reserves per block,
and warps and blocks per SM are capped.  The gate's worker asks the driver
(``cuOccupancyMaxActiveBlocksPerMultiprocessor``); this module answers where only the compile
resources (ptxas) and the launch are recorded, and says so (``"source": "computed"``).
"""
from __future__ import annotations

REG_ALLOC_UNIT = 256          #: registers are allocated per warp in multiples of this
REG_PARTITIONS = 4            #: register-file partitions (one per warp scheduler) since sm_70
LIMITERS = ("threads", "blocks", "registers", "shared_memory")   #: order in which ties are named


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def smem_granularity(cc: tuple[int, int]) -> int:
    return 128 if tuple(cc) >= (8, 0) else 256


def occupancy(threads_per_block: int, registers: int, static_smem: int, dynamic_smem: int, device: dict) -> dict:
    """Blocks and warps per SM for one launch on ``device`` (``DeviceInfo.to_json()``, complete
    with its per-SM limits).  ``blocks_per_sm`` is 0 where the block cannot be resident at all
    (too many registers or too much shared memory per block), with the reason in ``problem``."""
    warp = int(device.get("warp_size") or 32)
    max_warps = int(device["max_threads_per_sm"]) // warp
    warps_per_block = -(-int(threads_per_block) // warp)
    regs_per_warp = _round_up(max(int(registers), 1) * warp, REG_ALLOC_UNIT)
    reserved = int(device.get("reserved_smem_per_block") or 0)
    smem_block = _round_up(int(static_smem) + int(dynamic_smem) + reserved, smem_granularity(tuple(device["cc"])))
    problem = ""
    limits: dict[str, int] = {}
    limits["threads"] = max_warps // warps_per_block if warps_per_block else 0
    limits["blocks"] = int(device["max_blocks_per_sm"])
    # the per-block register check rounds the warps up to the partitions, as the hardware does
    if registers > int(device["max_registers_per_thread"]):
        limits["registers"], problem = 0, f"{registers} registers per thread exceed {device['max_registers_per_thread']}"
    elif regs_per_warp * _round_up(warps_per_block, REG_PARTITIONS) > int(device["max_registers_per_block"]):
        limits["registers"] = 0
        problem = (f"{registers} registers x {threads_per_block} threads exceed the "
                   f"{device['max_registers_per_block']} registers a block may hold")
    else:
        per_partition = int(device["max_registers_per_sm"]) // REG_PARTITIONS // regs_per_warp
        limits["registers"] = per_partition * REG_PARTITIONS // warps_per_block
    if int(static_smem) + int(dynamic_smem) > int(device.get("max_smem_per_block_optin") or device["max_smem_per_sm"]):
        limits["shared_memory"] = 0
        problem = problem or (f"{static_smem + dynamic_smem} bytes of shared memory exceed the opt-in maximum "
                              f"{device.get('max_smem_per_block_optin')} per block")
    else:
        limits["shared_memory"] = int(device["max_smem_per_sm"]) // smem_block if smem_block else limits["blocks"]
    blocks = max(0, min(limits.values()))
    limiter = next(k for k in LIMITERS if limits[k] == blocks)
    out = {"threads_per_block": int(threads_per_block), "registers": int(registers),
           "static_smem": int(static_smem), "dynamic_smem": int(dynamic_smem),
           "blocks_per_sm": blocks, "warps_per_sm": blocks * warps_per_block,
           "occupancy": round(blocks * warps_per_block / max_warps, 4) if max_warps else 0.0,
           "occupancy_limiter": limiter, "limits": limits, "source": "computed"}
    if problem:
        out["problem"] = problem
    return out


def resources_for_case(compile_info: dict | None, launch: dict | None, device: dict | None) -> dict | None:
    """``CaseResult.resources`` computed from an evaluation's ``compile.resources`` (ptxas:
    registers, spills, static shared memory) and a case's resolved launch, or None where either
    is missing."""
    res = (compile_info or {}).get("resources") or {}
    if not res.get("registers") or not launch or not device:
        return None
    block = list(launch.get("block") or [1])
    threads = 1
    for b in block:
        threads *= int(b)
    out = occupancy(threads, int(res["registers"]), int(res.get("smem", 0)), int(launch.get("shared_mem") or 0), device)
    out.update(spill_stores=int(res.get("spill_stores", 0)), spill_loads=int(res.get("spill_loads", 0)),
               local_bytes=int(res.get("stack", 0)))
    return out
