"""kernel_forge/model/resources.py: what a compiled kernel uses for one launch, and which resource limits it."""
from __future__ import annotations

import pytest

from kernel_forge.model.resources import case_resources, limits
from kernel_forge.model.worker_protocol import ModuleFacts, ResolvedLaunch

SM = {"max_threads": 2048, "max_blocks": 32, "registers": 65536, "shared_memory": 233472, "reserved_smem": 1024}


@pytest.mark.parametrize("threads, blocks", [(64, 32), (128, 16), (256, 8), (512, 4), (1024, 2)])
def test_resources_of_a_tiled_matmul_match_the_occupancy_measured_on_the_h200(threads, blocks):
    # bench/evidence/h200-2026-12-01-s4: 32 registers, 2 KB static smem -> 32/16/8/4/2 blocks per SM
    launch = ResolvedLaunch((16, 16, 1), (threads, 1, 1), 0)
    facts = ModuleFacts(registers=32, static_smem=2048, occupancy={(threads, 0): blocks}, sm=SM)
    assert min(limits(facts, launch).values()) == blocks
    res = case_resources(facts, launch, {"spill_stores": 0, "spill_loads": 4})
    assert res["blocks_per_sm"] == blocks and res["warps_per_sm"] == 64 and res["occupancy"] == 1.0
    assert res["occupancy_limiter"] == "threads" and res["spill_loads"] == 4 and res["static_smem"] == 2048


def test_the_limiter_is_the_resource_that_allows_fewest_blocks():
    launch = ResolvedLaunch((1, 1, 1), (256, 1, 1), 96 << 10)
    facts = ModuleFacts(registers=64, static_smem=0, occupancy={(256, 96 << 10): 2}, sm=SM)
    res = case_resources(facts, launch)
    assert res["occupancy_limiter"] == "shared_memory" and res["occupancy"] == 0.25
    facts = ModuleFacts(registers=128, occupancy={(256, 0): 2}, sm=SM)
    assert case_resources(facts, ResolvedLaunch((1, 1, 1), (256, 1, 1), 0))["occupancy_limiter"] == "registers"
    assert case_resources(None, launch) is None and case_resources(facts, None) is None


def test_only_the_resources_in_use_limit_and_registers_count_in_units_of_256_per_warp():
    launch = ResolvedLaunch((1, 1, 1), (256, 1, 1), 0)
    assert limits(ModuleFacts(sm=SM), launch) == {"threads": 8, "blocks": 32}        # no registers, no shared memory
    # 33 registers x 32 lanes = 1056, allocated as 1280: 65536 // 1280 = 51 warps, 6 blocks of 8 warps
    assert limits(ModuleFacts(registers=33, sm=SM), launch)["registers"] == 6
    # 10000 bytes + 1024 reserved per block: 233472 // 11024 = 21 blocks
    assert limits(ModuleFacts(static_smem=4000, sm=SM), ResolvedLaunch((1, 1, 1), (256, 1, 1), 6000)) == {
        "threads": 8, "blocks": 32, "shared_memory": 21}


def test_without_the_driver_s_count_for_this_launch_the_occupancy_is_unknown_but_the_limiter_is_not():
    facts = ModuleFacts(registers=128, local_bytes=24, occupancy={(128, 0): 4}, sm=SM)
    res = case_resources(facts, ResolvedLaunch((1, 1, 1), (256, 1, 1), 0))
    assert (res["blocks_per_sm"], res["warps_per_sm"], res["occupancy"]) == (None, None, None)
    assert res["occupancy_limiter"] == "registers" and res["local_bytes"] == 24 and res["spill_stores"] == 0
