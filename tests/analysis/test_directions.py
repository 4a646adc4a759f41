"""Tests of kernel_forge/analysis/directions.py: the directions drawn from a diagnosis."""
from __future__ import annotations

import pytest

from tests.support import recorded_run as rec
from kernel_forge.analysis.case_diagnosis import CaseDiagnosis
from kernel_forge.analysis.diagnosis import Diagnosis, diagnose
from kernel_forge.analysis.directions import direction_items, directions, headroom, register_blocked


def test_directions_are_ranked_by_their_gain_on_the_score_and_are_distinct():
    d = rec.diagnosis()
    dirs = directions(d, 5)
    assert len(dirs) == 5 and len(set(dirs)) == 5
    # global-memory latency limits all three cases (x2 each at most: x1.26 on the score); the small
    # grids of sq256 and rect (64 and 96 blocks on 132 SMs) x1.42; reaching cuBLAS on large x1.22
    assert dirs[0].startswith("the limit on case large is global-memory latency (long_scoreboard 51% of stalled warps")
    assert dirs[0].endswith("Worth up to x2.00 on the score")
    assert dirs[1].startswith("too few blocks: sq256 (64 blocks), rect (96 blocks) on 132 SMs leave SMs idle "
                              "(sq256 52%, rect 27% of them)") and dirs[1].endswith("Worth up to x1.42 on the score")
    assert dirs[2].startswith("focus on case large (m=4096, n=4096, k=4096): 5270.0 µs against cublas's 2900.0 µs")
    assert "limited there by global-memory latency" in dirs[2] and dirs[2].endswith("Worth up to x1.22 on the score")
    more = directions(d, 8)
    # a0004 computes 4 outputs per thread at 39 % of the FMA peak: register blocking is still advised
    assert any(x.startswith("below the FMA roof with a high FLOP/byte: register blocking") for x in more)
    assert any(x.startswith("latency-bound") for x in more)            # the small cases' bound
    assert any("long_scoreboard" in x for x in more)                   # from the profile
    assert not any("tensor cores (mma" in x for x in directions(d, 12))  # fp32: never offered


def test_directions_are_deterministic_and_cover_any_n():
    d = rec.diagnosis()
    assert directions(d, 3) == directions(rec.diagnosis(), 3)
    assert directions(d, 3) == directions(d, 6)[:3]
    many = directions(d, 20)
    assert len(many) == 20 and len(set(many)) == 20
    assert directions(d, 0) == []
    assert len(directions(Diagnosis(), 2)) == 2                          # nothing measured: generic ones


def test_spills_and_low_occupancy_lead_to_their_own_directions():
    d = rec.diagnosis(with_profile=False)
    c = d.case("large")
    c.resources = dict(c.resources, spill_stores=96, spill_loads=128, registers=255, occupancy=0.25,
                       occupancy_limiter="registers", blocks_per_sm=2)
    dirs = directions(d, 12)
    spill = next(x for x in dirs if x.startswith("cut register pressure"))
    assert "96 B stores / 128 B loads at 255 registers per thread" in spill
    occ = next(x for x in dirs if x.startswith("raise the theoretical occupancy"))
    assert "case large (25%, limited by registers): fewer registers per thread (now 255" in occ


def test_a_memory_bound_task_gets_memory_directions():
    from kernel_forge.model.task import load_task
    from kernel_forge.common.stats import summarize
    from kernel_forge.model.verdict import CaseResult, Evaluation

    task = load_task(rec.ROOT / "manifests" / "vector_add.json")
    ev = Evaluation(label="x", passed=True, cases=[])
    for case in task.cases_with("performance"):
        n = case.vars["n"]
        t = 12 * n / 3.0e12 * 1e6          # 70 % of the measured bandwidth
        r = CaseResult(case.name, "performance", True, timing=summarize([t] * 5),
                       launch={"grid": [n // 256, 1, 1], "block": [256, 1, 1], "shared_mem": 0})
        ev.cases.append(r)
    e = rec.env()
    d = diagnose(task, ev.to_json(), device=e["device"], calibration=e["calibration"])
    assert {c.bound for c in d.cases} == {"memory"}
    assert all(c.pct_bandwidth == pytest.approx(100 * 3.0e12 / 4.26e12) for c in d.cases)
    dirs = directions(d, 2)
    assert dirs[0].startswith("memory-bound at 70% of bandwidth at best: move fewer bytes")


def test_headroom_is_the_room_to_the_nearer_roof():
    # 25 % of bandwidth and 40 % of the compute peak: the compute roof is nearer, 100 / 40 = x2.5 away
    assert headroom(CaseDiagnosis("c", 10.0, pct_bandwidth=25.0, pct_compute=40.0)) == pytest.approx(2.5)
    assert headroom(CaseDiagnosis("c", 10.0, pct_bandwidth=80.0)) == pytest.approx(1.25)
    # nothing measured (or a zero share, which says nothing about a roof): no estimate
    assert headroom(CaseDiagnosis("c", 10.0)) is None
    assert headroom(CaseDiagnosis("c", 10.0, pct_bandwidth=0.0, pct_compute=0.0)) is None


def test_a_register_tile_is_seen_in_the_hot_loops_ffma_per_shared_load_or_in_half_the_fp32_peak():
    case = CaseDiagnosis("large", 100.0, pct_compute=30.0)
    # 8 FFMA per 2 LDS is 4 per load: a register tile (FEW_FFMA_PER_LDS); 6 per 2 is not
    assert register_blocked(Diagnosis(cases=[case], instruction_mix={"kernel": {"ffma": 8, "lds": 2}}))
    assert not register_blocked(Diagnosis(cases=[case], instruction_mix={"kernel": {"ffma": 6, "lds": 2}}))
    # a mix that could not be read says nothing
    assert not register_blocked(Diagnosis(cases=[case], instruction_mix={"error": "no nvdisasm"}))
    # without a mix: 50 % of the fp32 FMA peak on some case, and only against the fp32 peak
    fp32, tensor = {"key": "fp32"}, {"key": "tensor16"}
    assert register_blocked(Diagnosis(cases=[case, CaseDiagnosis("sq", 5.0, pct_compute=50.0)], peak=fp32))
    assert not register_blocked(Diagnosis(cases=[case, CaseDiagnosis("sq", 5.0, pct_compute=49.9)], peak=fp32))
    assert not register_blocked(Diagnosis(cases=[CaseDiagnosis("sq", 5.0, pct_compute=60.0)], peak=tensor))


def test_a_register_tiled_kernel_below_the_fma_roof_is_never_advised_register_blocking():
    pipe = CaseDiagnosis("large", 100.0, pct_compute=55.0, bound="pipe")
    tiled = Diagnosis(cases=[pipe], peak={"key": "fp32"})
    keys = [k for k, _ in direction_items(tiled, 12)]
    assert "pipe:overlap" in keys and "pipe:regblock" not in keys
    pipe.pct_compute = 20.0                     # no tile: register blocking comes first among the bound's
    keys = [k for k, _ in direction_items(tiled, 12)]
    assert keys.index("pipe:regblock") < keys.index("pipe:overlap")


def test_repeats_past_the_distinct_directions_are_keyed_as_variants():
    items = direction_items(Diagnosis(), 6)          # nothing measured: the bound's one and three generic ones
    keys = [k for k, _ in items]
    assert keys == ["gen:measure", "gen:tune", "gen:rewrite", "gen:instr", "gen:measure#2", "gen:tune#3"]
    assert items[4][1] == items[0][1] + (" (variant 2: choose a design the other proposals of this iteration "
                                         "are unlikely to pick)")
