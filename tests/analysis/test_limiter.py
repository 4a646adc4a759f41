"""The diagnosis names the pipe: "compute-bound" only where the FMA (or tensor) pipe is busy;
otherwise the stall or pipe that limits the kernel, from the profile's stalls and pipe metrics
and the instruction mix of its hot loop, with its advice first among the directions.

The case the issue filed: the second-iteration prompt of a replay run on the H200 called
matmul_f32 4096^3 "compute-bound (682.7 FLOP/byte >= ridge)" at 17 % of the FMA rate with
mio_throttle 46 % -- a 32 x 32 tile computing 4 outputs per thread issues 5 LDS per 4 FFMA.
Its profile (tests/data/ncu-matmul-tiled32-h200.json) is the one ncu measured then."""
from __future__ import annotations

import copy
import json

import pytest

from kernel_forge.analysis.diagnosis import diagnose
from kernel_forge.analysis.directions import direction_items, directions
from kernel_forge.analysis.limiter import PIPE_BUSY_PCT
from kernel_forge.gpu.instruction_mix import mix_of

from tests.support import recorded_run as rec

H200_PROFILE = json.loads((rec.ROOT / "tests" / "data" / "ncu-matmul-tiled32-h200.json").read_text())
#: what the H200 measured for that kernel (prompt-002.md of bench/evidence/h200-2026-12-01-s4/stage-b)
MEDIANS = {"sq256": 14.22, "rect": 17.73, "large": 11903.0}
CUBLAS = {"sq256": 10.72, "rect": 9.58, "large": 2679.4}
INITIAL = {"sq256": 21.10, "rect": 26.70, "large": 25490.0}


def _with_medians(ev: dict, medians: dict) -> dict:
    ev = copy.deepcopy(ev)
    for c in ev["cases"]:
        if c["name"] in medians and c.get("timing"):
            m = medians[c["name"]]
            c["timing"].update(median=m, p10=m * 0.99, p90=m * 1.01)
    return ev


@pytest.fixture(scope="module")
def tiled_mix():
    pytest.importorskip("cuda.bindings.nvrtc")
    src = (rec.RUN / "attempts" / "a0004.cu").read_text()          # the 32 x 32 tile, 4 rows per thread
    return mix_of(src, arch="sm_90", entry="matmul_f32", defines={"TILE": 32, "RPT": 4}).to_json()


def tiled(profile=None, mix=None):
    at = rec.attempts()
    hist = rec.history()
    best = _with_medians(at["a0004"]["evaluation"], MEDIANS)
    init = _with_medians(at["a0000"]["evaluation"], INITIAL)
    base = {"cublas": _with_medians(hist["baselines"]["cublas"], CUBLAS)}
    e = rec.env()
    return diagnose(rec.task(), best, initial=init, baselines=base, device=e["device"],
                    calibration=e["calibration"], profile=profile, mix=mix)


def test_the_issue_s_profile_is_named_shared_memory_instruction_issue_not_compute_bound(tiled_mix):
    d = tiled(H200_PROFILE, tiled_mix)
    large = d.case("large")
    assert large.pct_compute == pytest.approx(17.3, abs=0.1) and large.intensity == pytest.approx(682.7, abs=0.1)
    assert large.bound == "pipe" and large.pipe_busy == {"pct": pytest.approx(17.25, abs=0.1), "pipe": "FMA",
                                                         "source": "useful FLOP rate"}
    lim = large.limiter
    assert lim["key"] == "shared_issue" and lim["what"] == "shared-memory instruction issue"
    assert "mio_throttle 46% of stalled warps" in lim["evidence"]
    assert "hot loop 5 LDS per 4 FFMA, 32-bit LDS" in lim["evidence"]
    line = next(l for l in d.render().splitlines() if l.startswith("- large"))
    assert "limited by shared-memory instruction issue (mio_throttle 46% of stalled warps" in line
    assert "compute-bound (" not in line and "not compute-bound, although 682.7 FLOP/byte >= ridge" in line
    # SM 95 % is the busiest sub-unit, and the text says so
    assert "SM 95.0% of peak (SM: its busiest sub-unit, not the FMA pipe)" in d.render()


def test_the_advice_for_the_named_limit_comes_first_even_at_one_candidate(tiled_mix):
    d = tiled(H200_PROFILE, tiled_mix)
    first = directions(d, 1)[0]
    assert first.startswith("the limit on case large is shared-memory instruction issue (")
    assert "64 FFMA per 4 LDS.128" in first and "transposed" in first
    # the generic mio_throttle stall advice is not repeated: the limit already gives it
    assert not any(x.startswith("the profiler's top warp stall is mio_throttle") for x in directions(d, 12))


def test_compute_bound_only_where_the_fma_pipe_is_busy(tiled_mix):
    prof = copy.deepcopy(H200_PROFILE)
    prof["cases"]["large"]["fma_pipe_pct"] = PIPE_BUSY_PCT + 20
    d = tiled(prof, tiled_mix)
    large = d.case("large")
    assert large.bound == "compute" and large.pipe_busy["source"] == "ncu pipe cycles"
    assert "682.7 FLOP/byte >= ridge" in large.bound_why and "FMA pipe 80% busy (ncu pipe cycles)" in large.bound_why
    prof["cases"]["large"]["fma_pipe_pct"] = PIPE_BUSY_PCT - 1       # measured, and not busy: the pipe is named
    assert tiled(prof, tiled_mix).case("large").bound == "pipe"


def test_without_a_profile_the_mix_alone_names_shared_memory_issue(tiled_mix):
    d = tiled(None, tiled_mix)
    lim = d.case("large").limiter
    assert d.case("large").bound == "pipe" and lim["key"] == "shared_issue"
    assert "5 LDS per 4 FFMA" in lim["evidence"] and "no profiler stalls" in lim["evidence"]
    assert "Instruction mix of this kernel:" in d.render() and "(5 LDS per 4 FFMA)" in d.render()


def test_without_profile_or_mix_the_limit_is_unnamed_but_never_called_compute_bound():
    d = tiled(None, None)
    large = d.case("large")
    assert large.bound == "pipe" and large.limiter["key"] == "unnamed"
    assert "no profiler stalls to name it" in large.limiter["what"]
    assert not any(x.startswith("the limit on case") for x in directions(d, 4))   # nothing specific to say


def test_bank_conflicts_are_named_from_the_shared_memory_wavefronts(tiled_mix):
    prof = copy.deepcopy(H200_PROFILE)
    prof["cases"]["large"].update(shared_ld_wavefronts=8.0e9, shared_ld_conflicts=4.0e9, shared_ld_instructions=4.0e9)
    lim = tiled(prof, tiled_mix).case("large").limiter
    assert lim["key"] == "shared_conflicts" and "50% of shared-memory wavefronts are bank-conflict replays" in lim["evidence"]
    assert "pad the inner dimension" in lim["advice"]


def test_global_latency_is_named_for_a_long_scoreboard_profile(tiled_mix):
    prof = copy.deepcopy(H200_PROFILE)
    prof["cases"]["large"]["stalls"] = [{"reason": "long_scoreboard", "share": 0.62},
                                         {"reason": "barrier", "share": 0.2}]
    lim = tiled(prof, tiled_mix).case("large").limiter
    assert lim["key"] == "global_latency" and lim["evidence"].startswith("long_scoreboard 62% of stalled warps")


def test_mufu_heavy_mio_is_named_special_function_issue():
    from kernel_forge.analysis.case_diagnosis import CaseDiagnosis
    from kernel_forge.analysis.limiter import name_limit
    c = CaseDiagnosis(name="x", median_us=10.0, bound="pipe",
                      profile={"stalls": [{"reason": "mio_throttle", "share": 0.5}]})
    mix = {"source": "sass", "kernel": {"mufu": 64, "lds": 4, "ffma": 32}, "kernel_widths": {}, "instructions": 200,
           "hot_loop": {"start": "0x0", "end": "0x100", "instructions": 150, "counts": {"mufu": 64, "lds": 4, "ffma": 32},
                        "widths": {"lds": {"32": 4}}}}
    assert name_limit(c, mix)["key"] == "mufu_issue"


def test_theoretical_and_achieved_occupancy_are_named_apart(tiled_mix):
    d = tiled(H200_PROFILE, tiled_mix)
    text = d.render()
    assert "per SM = 100% theoretical occupancy" in text
    assert "achieved occupancy 12.5% (theoretical 100.0%)" in text          # sq256: 64 blocks for 132 SMs
    row = next(l for l in d.render_markdown().splitlines() if l.startswith("| sq256"))
    assert "100% theoretical (threads, driver); 12% achieved" in row


def test_metrics_this_gpu_lacks_are_said_and_present_ones_shown(tiled_mix):
    prof = copy.deepcopy(H200_PROFILE)
    prof["metrics_missing"] = ["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"]
    prof["cases"]["large"].update(fma_pipe_pct=18.0, mio_issue_pct=71.0, issue_active_pct=40.0, l1_hit_pct=12.0,
                                  l2_hit_pct=91.0, shared_ld_wavefronts=2.0e9, shared_ld_conflicts=1.0e7)
    d = tiled(prof, tiled_mix)
    text = d.render()
    assert "Not measured on this GPU (ncu has no such metric): sm__pipe_tensor_op_gmma" in text
    assert "FMA pipe 18.0%, MIO issue 71.0%, issue slots 40.0%" in text and "hit rates L1 12.0%, L2 91.0%" in text
    assert d.case("large").pipe_busy["source"] == "ncu pipe cycles"


def test_a_16_bit_task_reads_the_tensor_pipe():
    from kernel_forge.analysis.limiter import pipe_busy
    assert pipe_busy("tensor16", 5.0, {"tensor_hmma_pct": 3.0, "tensor_gmma_pct": 71.0}) == {
        "pct": 71.0, "pipe": "tensor", "source": "ncu pipe cycles"}
    assert pipe_busy("tensor16", 5.0, {"fma_pipe_pct": 90.0})["source"] == "useful FLOP rate"
    assert pipe_busy("fp32", None, {}) is None


# ------------------------------------------------- issue 32: the recorded s9 run's best, a0107

def test_a_busy_fma_pipe_does_not_switch_off_the_issue_slot_limit():
    """a0107 on 4096^3: 66 % of the FMA peak, the FMA pipe 69 % busy, but the issue slots 79 % busy,
    not_selected 54 % and only 87 % of what is issued goes to the FMA pipe: issue is what is left,
    and the kernel is not told to use the register blocking it already has."""
    from tests.support import s9_run

    opt = s9_run.optimizer()
    d = opt.diagnoses.of_best(opt.state)
    large = d.case("large")
    assert large.bound == "compute" and large.limiter["key"] == "issue_slots"
    ev = large.limiter["evidence"]
    assert "issue slots 79% busy" in ev and "not_selected 54%" in ev
    assert "87% of issued instructions go to the FMA pipe (ncu)" in ev
    assert "register blocking" not in large.limiter["advice"]
    line = next(l for l in d.render().splitlines() if l.startswith("- large"))
    assert "7.76 waves of 1024 blocks: the last wave is 76% full, so about 3% of the SM time is idle" in line


def test_the_small_grids_come_first_and_no_advice_is_what_the_kernel_already_does():
    from tests.support import s9_run

    opt = s9_run.optimizer()
    d = opt.diagnoses.of_best(opt.state)
    items = direction_items(d, 10)
    keys = [k for k, _ in items]
    # sq256 and rect run 32 and 48 blocks on 132 SMs: the main lever on the geometric mean
    assert keys[0] == "grid:small"
    assert items[0][1].startswith("too few blocks: sq256 (32 blocks), rect (48 blocks) on 132 SMs")
    assert "split-K" in items[0][1] and items[0][1].endswith("Worth up to x2.25 on the score")
    assert "grid:tail:large" in keys and "limit:issue_slots" in keys
    text = " ".join(t for _, t in items)
    assert "fewer registers" not in text and "fewer accumulators" not in text      # a register tile
    assert "register blocking" not in text                                         # it already has one
