"""The worker protocol's CPU parts: timing counts, launches, messages, resources."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from kernel_forge.model.candidate import Launch
from kernel_forge.common.dtypes import BY_NAME
from kernel_forge.common.errors import KForgeError
from kernel_forge.model.resources import case_resources, limits
from kernel_forge.model.task import Tolerance
from kernel_forge.model.tolerance import compare
from kernel_forge.config.gate_settings import TimingOptions
from kernel_forge.model.worker_protocol import FIRST, KernelSpec, ModuleFacts, Observation, ResolvedLaunch, Run, RunPlan, StageObservation, resolve_launch, timing_counts


@pytest.mark.parametrize("estimate_s, reps, warmup", [
    (57e-6, 100, 10),      # vector_add 2^24: the budget allows more than the maximum
    (25e-3, 10, 2),        # matmul 4096^3: 0.25 s / 25 ms = 10 reps, warm-up at its minimum
    (5e-3, 50, 5),
    (1.0, 10, 2),          # slower than the budget: the minimum still runs
])
def test_timing_counts_follow_the_budget_within_min_and_max(estimate_s, reps, warmup):
    plan = RunPlan(case="c", seed=0, timing=TimingOptions(reps=100, warmup=10, min_reps=10, min_warmup=2,
                                                          timing_budget_s=0.25, warmup_budget_s=0.025))
    assert timing_counts(estimate_s, 0.0, plan) == (warmup, reps)


def test_timing_counts_never_exceed_the_asked_maximum():
    plan = RunPlan(case="c", seed=0, timing=TimingOptions(reps=5, warmup=1, min_reps=10, min_warmup=2))
    assert timing_counts(1e-6, 1e-6, plan) == (1, 5)
    assert timing_counts(0.0, 0.0, RunPlan(case="c", seed=0, timing=TimingOptions(warmup=0))) == (0, 100)
    # overhead (flush, resets) counts against the budget too
    plan = RunPlan(case="c", seed=0, timing=TimingOptions(reps=1000, warmup=10, timing_budget_s=0.25))
    assert timing_counts(50e-6, 200e-6, plan)[1] == 1000 and timing_counts(1e-3, 4e-3, plan)[1] == 50


def test_resolve_launch_pads_and_uses_defines():
    launch = Launch(grid=("cdiv(n, BLOCK)",), block=("BLOCK",), shared_mem="BLOCK * 4")
    got = resolve_launch(launch, {"n": 1000}, {"BLOCK": 128})
    assert got == ResolvedLaunch((8, 1, 1), (128, 1, 1), 512) and got.threads == 128
    assert got.to_json() == {"grid": [8, 1, 1], "block": [128, 1, 1], "shared_mem": 512}
    with pytest.raises(KForgeError):
        resolve_launch(launch, {"n": 1000}, {})


def test_messages_survive_the_pipe():
    spec = KernelSpec(kind="cuda", label="k.cu", cubin=b"\x7fELF", entry="k", launch=Launch(("1",), ("32",)))
    run = pickle.loads(pickle.dumps(Run(spec, RunPlan(case="odd", seed=3, launch=ResolvedLaunch((1, 1, 1), (32, 1, 1))))))
    assert run.spec.key == spec.key and run.plan.launch.threads == 32
    chk = compare("c", np.ones(3, np.float32), np.ones(3), BY_NAME["float32"], Tolerance())
    obs = Observation("odd", 3, stages=[StageObservation(FIRST, {"c": 2**63 + 5}, outputs=[chk], kept=True)])
    back = pickle.loads(pickle.dumps(obs))
    assert back.stage(FIRST).outputs[0].ok and back.stage(FIRST).fingerprints["c"] == 2**63 + 5
    assert back.stage("second launch") is None


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
