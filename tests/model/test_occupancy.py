"""kernel_forge/model/occupancy.py: the pure-Python occupancy calculator, against the H200's driver and ncu."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kernel_forge.gpu import device_description as dd
from kernel_forge.model.occupancy import occupancy, resources_for_case, smem_granularity

from tests.support.fakes import H200

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "bench" / "evidence" / "h200-2026-12-01-s4" / "probe" / "probe.json"


@pytest.fixture(scope="module")
def h200():
    return dd.load(dd.shipped("h200"))


def test_occupancy_matches_the_driver_on_the_h200(h200):
    """cuOccupancyMaxActiveBlocksPerMultiprocessor on the H200 (probe): a 32-register kernel with
    2 KB of static shared memory fits 32/16/8/4/2 blocks at 64..1024 threads."""
    probe = json.loads(PROBE.read_text())
    regs = probe["func_attrs_mm_plain"]["CU_FUNC_ATTRIBUTE_NUM_REGS"]
    smem = probe["func_attrs_mm_plain"]["CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"]
    for threads, blocks in probe["occupancy_mm_plain"].items():
        r = occupancy(int(threads), regs, smem, 0, h200[0])
        assert r["blocks_per_sm"] == blocks, threads
        assert r["occupancy"] == 1.0 and r["source"] == "computed"


def test_occupancy_limits_agree_with_ncu(h200):
    """ncu's launch__occupancy_limit_registers / _warps / _blocks for that kernel at 256 threads."""
    r = occupancy(256, 32, 2048, 0, h200[0])
    assert (r["limits"]["registers"], r["limits"]["threads"], r["limits"]["blocks"]) == (8, 8, 32)


@pytest.mark.parametrize("threads, regs, static, dynamic, blocks, limiter", [
    (256, 128, 0, 0, 2, "registers"),            # 4096 registers a warp: 4 warps per partition
    (256, 72, 0, 0, 3, "registers"),             # 72 x 32 = 2304 -> 2304 per warp: 7 per partition, 28 warps
    (128, 32, 48 * 1024, 0, 4, "shared_memory"),  # 49152 + 1024 reserved per block
    (128, 32, 0, 100 * 1024, 2, "shared_memory"),
    (32, 16, 0, 0, 32, "blocks"),
    (1024, 32, 0, 0, 2, "threads"),
    (1024, 255, 0, 0, 0, "registers"),           # does not fit one block
    (128, 32, 40000, 200000, 0, "shared_memory"),  # above the opt-in maximum
])
def test_occupancy_cases(h200, threads, regs, static, dynamic, blocks, limiter):
    r = occupancy(threads, regs, static, dynamic, h200[0])
    assert (r["blocks_per_sm"], r["occupancy_limiter"]) == (blocks, limiter)
    assert r["warps_per_sm"] == blocks * -(-threads // 32)
    if blocks == 0:
        assert r["problem"]


def test_resources_for_case_reads_ptxas_and_the_launch(h200):
    info = {"resources": {"registers": 40, "spill_stores": 8, "spill_loads": 4, "smem": 4096, "stack": 16}}
    r = resources_for_case(info, {"grid": [10, 1, 1], "block": [16, 16, 1], "shared_mem": 1024}, h200[0])
    assert (r["threads_per_block"], r["registers"], r["static_smem"], r["dynamic_smem"]) == (256, 40, 4096, 1024)
    assert (r["spill_stores"], r["spill_loads"], r["local_bytes"]) == (8, 4, 16)
    assert r["blocks_per_sm"] == 6          # 40 regs -> 1280 per warp: 12 warps per partition, 48 warps
    assert resources_for_case({"resources": {}}, {"block": [1]}, h200[0]) is None
    assert resources_for_case(info, None, h200[0]) is None


def test_an_ada_gpu_fits_fewer_threads(h200):
    ada = dd.complete({**json.loads(json.dumps(replace(H200, cc=(8, 9)).to_json())),
                       "max_threads_per_sm": None, "max_smem_per_sm": None, "max_blocks_per_sm": None})
    r = occupancy(1024, 32, 0, 0, ada)
    assert ada["max_threads_per_sm"] == 1536 and r["blocks_per_sm"] == 1


def test_shared_memory_is_allocated_in_128_byte_units_from_sm80_and_256_before():
    """8320 bytes a block: 65 units of 128, or 33 of 256 (8448 bytes); an SM of 8 x 8320 bytes fits 8 or 7 blocks."""
    assert (smem_granularity((7, 5)), smem_granularity((8, 0)), smem_granularity((12, 0))) == (256, 128, 128)
    sm = {"max_threads_per_sm": 2048, "max_blocks_per_sm": 32, "max_registers_per_thread": 255,
          "max_registers_per_block": 65536, "max_registers_per_sm": 65536, "max_smem_per_sm": 8 * 8320,
          "reserved_smem_per_block": 0, "warp_size": 32}
    new, old = occupancy(32, 16, 8320, 0, {**sm, "cc": (8, 0)}), occupancy(32, 16, 8320, 0, {**sm, "cc": (7, 5)})
    assert (new["blocks_per_sm"], new["occupancy_limiter"]) == (8, "shared_memory")
    assert (old["blocks_per_sm"], old["occupancy_limiter"]) == (7, "shared_memory")
    assert old["occupancy"] == round(7 / 64, 4) and "problem" not in old


def test_registers_are_allocated_per_warp_in_units_of_256(h200):
    """33 registers x 32 lanes = 1056, allocated as 1280: 12 warps per register-file partition, 48 per SM,
    6 blocks of 8 warps (1056 unrounded would give 15 per partition and 7 blocks)."""
    r = occupancy(256, 33, 0, 0, h200[0])
    assert (r["blocks_per_sm"], r["occupancy_limiter"], r["limits"]["registers"]) == (6, "registers", 6)
