"""The worker protocol's CPU parts: timing counts, launches, messages (the resources a launch uses:
test_resources.py; the poison patterns: tests/common/test_dtypes.py)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from kernel_forge.model.candidate import Launch
from kernel_forge.common.dtypes import BY_NAME
from kernel_forge.common.errors import KForgeError
from kernel_forge.model.task import Tolerance
from kernel_forge.model.tolerance import compare
from kernel_forge.config.gate_settings import TimingOptions
from kernel_forge.model.worker_protocol import FIRST, KernelSpec, Observation, ResolvedLaunch, Run, RunPlan, StageObservation, resolve_launch, timing_counts


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


