"""Tests of kernel_forge/gate/sampling.py: which elements of the kept outputs the parent re-checks."""
from __future__ import annotations

import numpy as np

from kernel_forge.gate.sampling import sample_indices
from kernel_forge.model.tolerance import OutputCheck
from kernel_forge.model.worker_protocol import AFTER_TIMING, FIRST, REPEAT, Observation, StageObservation


def stage(name, *checks, kept=True):
    return StageObservation(stage=name, fingerprints={}, outputs=list(checks), kept=kept)


def test_only_kept_stages_with_elements_are_sampled_within_range():
    obs = Observation(case="odd", seed=1, stages=[
        stage(FIRST, OutputCheck("c", ok=True, total=1000)),
        stage(REPEAT, OutputCheck("c", ok=True, total=1000), kept=False),
        stage(AFTER_TIMING, OutputCheck("c", ok=True, total=0),
              OutputCheck("d", ok=False, total=50, shape_error="shape (5,) instead of (50,)"))])
    got = sample_indices(obs, {"c": (1000,), "d": (50,)}, seed=3, sample_size=40)
    assert set(got) == {FIRST, AFTER_TIMING} and got[AFTER_TIMING] == {}
    picks = got[FIRST]["c"]
    assert 0 < len(picks) <= 40 and picks.min() >= 0 and picks.max() < 1000
    assert list(picks) == sorted(set(picks.tolist()))                       # unique, in order


def test_every_mismatch_the_worker_named_is_among_the_picks_as_a_flat_index():
    named = [{"index": [3, 7], "actual": 1.0, "expected": 2.0}, {"index": [99, 63], "actual": 0, "expected": 1}]
    obs = Observation(case="rect", seed=0, stages=[stage(FIRST, OutputCheck("c", ok=False, total=100 * 64,
                                                                            mismatches=2, first=named))])
    picks = sample_indices(obs, {"c": (100, 64)}, seed=0, sample_size=5)[FIRST]["c"]
    assert {3 * 64 + 7, 99 * 64 + 63} <= set(picks.tolist())
    assert len(picks) <= 5 + 2


def test_a_named_index_outside_the_shape_or_of_another_rank_is_ignored():
    named = [{"index": [100, 0]}, {"index": [-1, 2]}, {"index": [5]}]
    obs = Observation(case="rect", seed=0, stages=[stage(FIRST, OutputCheck("c", ok=False, total=6400, first=named))])
    picks = sample_indices(obs, {"c": (100, 64)}, seed=0, sample_size=3)[FIRST]["c"]
    assert len(picks) <= 3 and picks.max() < 6400


def test_a_small_output_is_drawn_at_most_its_size_and_the_seed_decides_the_picks():
    obs = Observation(case="tiny", seed=0, stages=[stage(FIRST, OutputCheck("c", ok=True, total=4))])
    few = sample_indices(obs, {"c": (4,)}, seed=11, sample_size=1000)[FIRST]["c"]
    assert set(few.tolist()) <= {0, 1, 2, 3}
    big = Observation(case="odd", seed=0, stages=[stage(FIRST, OutputCheck("c", ok=True, total=10**6))])
    a, b, c = (sample_indices(big, {"c": (10**6,)}, seed=s, sample_size=64)[FIRST]["c"] for s in (5, 5, 6))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    expected = np.unique(np.random.default_rng(5).integers(0, 10**6, size=64))
    assert np.array_equal(a, expected)
