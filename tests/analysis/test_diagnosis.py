"""The diagnosis of a recorded matmul_f32 best (CPU); the directions drawn from it are tested in
test_directions.py."""
from __future__ import annotations

import json

import pytest

from kernel_forge.analysis.diagnosis import diagnose
from kernel_forge.analysis.directions import directions

from tests.support import recorded_run as rec

FP32 = 2 * 132 * 128 * 1.98e9      # FMA lanes x SMs x boost clock of the H200 (the driver's values)


def test_each_performance_case_gets_its_roofline_bound_against_the_fp32_peak():
    d = rec.diagnosis()
    assert [c.name for c in d.cases] == ["sq256", "rect", "large"]       # correctness and holdout cases left out
    assert d.peak["key"] == "fp32" and d.peak["flops"] == pytest.approx(FP32)
    assert d.bandwidth == 4.26e12 and d.bandwidth_source == "measured copy bandwidth"
    assert d.ridge == pytest.approx(FP32 / 4.26e12)
    large = d.case("large")
    assert large.intensity == pytest.approx(2 * 4096 ** 3 / (4 * 3 * 4096 ** 2))
    # above the ridge point, but at 39 % of the FMA rate with warps waiting on global memory: not compute-bound
    assert large.bound == "pipe" and "682.7 FLOP/byte >= ridge 15.7" in large.bound_why
    assert large.limiter["key"] == "global_latency" and large.pipe_busy["pct"] == pytest.approx(39.0, abs=0.05)
    flops = 2 * 4096 ** 3
    assert large.pct_compute == pytest.approx(100 * flops / 5270e-6 / FP32)   # 39 %, not 2.5 % of tensor
    assert large.pct_bandwidth == pytest.approx(100 * 4 * 3 * 4096 ** 2 / 5270e-6 / 4.26e12, rel=1e-3)
    # the small cases are far below both roofs with fewer blocks than SMs (32x32 tiles): latency
    sq = d.case("sq256")
    assert (sq.blocks, sq.bound) == (64, "latency") and sq.bound_why == "only 64 blocks for 132 SMs"
    assert d.case("rect").bound == "latency"


def test_the_naive_kernel_is_latency_bound_by_a_short_wave_on_the_small_cases():
    d = rec.diagnosis("a0000", with_profile=False)
    sq = d.case("sq256")
    # 256 blocks of 256 threads, 8 resident per SM on 132 SMs: a quarter of one wave
    assert sq.blocks == 256 and sq.waves == pytest.approx(256 / (8 * 132))
    assert sq.bound == "latency" and "0.24 of one wave" in sq.bound_why
    # 10.6 % of the FMA rate with nothing measured to name the limit: said so, never "compute-bound"
    assert d.case("large").bound == "pipe" and d.case("large").limiter["key"] == "unnamed"


def test_baselines_and_the_initial_kernel_are_timed_and_every_slower_case_is_named():
    d = rec.diagnosis()
    large = d.case("large")
    assert large.baseline_us == {"cublas": 2900.0} and large.vs_baselines["cublas"] == pytest.approx(2900 / 5270)
    assert large.initial_us == 19450.0 and large.vs_initial == pytest.approx(19450 / 5270)
    assert d.slower == [{"case": "large", "than": "cublas", "ratio": pytest.approx(0.5503, abs=1e-4),
                         "us": 5270.0, "other_us": 2900.0}]
    assert d.slower_line() == "large x0.55 vs cublas (5270.0 vs 2900.0 µs)"
    # the naive kernel is slower than cuBLAS everywhere, and never slower than itself
    naive = rec.diagnosis("a0000", with_profile=False)
    assert [(s["case"], s["than"]) for s in naive.slower] == [("sq256", "cublas"), ("rect", "cublas"), ("large", "cublas")]


def test_resources_come_from_the_worker_or_are_computed_from_ptxas_and_the_launch():
    d = rec.diagnosis()
    r = d.case("large").resources
    assert d.case("large").resources_source == "driver"
    assert (r["registers"], r["static_smem"], r["blocks_per_sm"], r["occupancy"]) == (32, 8320, 8, 1.0)
    # an older run without CaseResult.resources: the same figures, computed, and said so
    old = rec.diagnosis(drop_resources=True)
    c = old.case("large")
    assert c.resources_source == "computed"
    assert (c.resources["registers"], c.resources["static_smem"], c.resources["blocks_per_sm"]) == (32, 8320, 8)
    assert c.resources["occupancy_limiter"] == "threads"
    assert "resources (computed): 32 registers/thread" in old.render()
    assert "resources (driver): 32 registers/thread" in d.render()


def test_the_profile_adds_ncu_lines_and_its_absence_is_explained():
    d = rec.diagnosis()
    text = d.render()
    assert ("ncu: DRAM 4.2%, L2 5.7%, SM 71.5% of peak (SM: its busiest sub-unit, not the FMA pipe); achieved "
            "occupancy 46.3% (theoretical 100.0%)") in text
    assert "top warp stalls: long_scoreboard 51%, barrier 17%" in text
    refused = {"available": False, "reason": "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission",
               "tool": "ncu", "seconds": 1.2, "cases": {}}
    d2 = rec.diagnosis(prof=refused)
    assert "ncu:" not in d2.render()
    assert ("No profiler metrics: ==ERROR== ERR_NVGPUCTRPERM - The user does not have permission; the harness's "
            "own figures above") in d2.render()
    assert "resources (driver)" in d2.render()            # what the harness computes still stands


def test_the_rendered_diagnosis_snapshot():
    lines = rec.diagnosis().render().splitlines()
    assert lines[0] == ("Roofline: fp32 FMA on CUDA cores 66.9 TFLOP/s, measured copy bandwidth 4260 GB/s, "
                        "ridge point 15.7 FLOP/byte.")
    assert lines[1] == ("- sq256 (m=256, n=256, k=256): 6.00 µs (p10 5.95, p90 6.05); 3.1% of bandwidth, 8.4% of the "
                        "fp32 peak, 42.7 FLOP/byte; latency-bound (only 64 blocks for 132 SMs); the profile names "
                        "global-memory latency (long_scoreboard 51% of stalled warps); vs cublas 11.00 µs: "
                        "x1.83; vs initial 15.26 µs: x2.54")
    assert lines[2] == ("  resources (driver): 32 registers/thread, no spills, shared memory 8320 B static + 0 B dynamic "
                        "per block; 8 blocks of 256 threads (64 warps) per SM = 100% theoretical occupancy")
    large = next(l for l in lines if l.startswith("- large"))
    assert "vs cublas 2900.0 µs: x0.55 (slower)" in large and "limited by global-memory latency" in large
    assert "Slower than a reference on: large x0.55 vs cublas (5270.0 vs 2900.0 µs)" in lines
    table = rec.diagnosis().render_markdown().splitlines()
    assert table[0].startswith("| case | median µs | bound | FLOP/B | % bw | % peak | x initial | x cublas | regs")
    assert table[4] == ("| large | 5270.0 | pipe: global-memory latency | 682.7 | 0.9 | 39.0 | 3.69 | 0.55 | 32 | 0 | "
                        "8320+0 | 100% theoretical (threads, driver); 46% achieved | 4/6/72 | 39 (useful FLOP rate) | "
                        "long_scoreboard |")


def test_no_holdout_case_reaches_the_diagnosis():
    # the initial kernel's evaluation holds the holdout case: the diagnosis of it must not
    at = rec.attempts()
    assert any(c["role"] == "holdout" for c in at["a0000"]["evaluation"]["cases"])
    d = rec.diagnosis("a0000")
    dumped = json.dumps(d.to_json()) + d.render() + d.render_markdown() + " ".join(directions(d, 8))
    assert not any(mark in dumped for mark in rec.HOLDOUT_MARKS)
    assert "holdout" not in dumped


def test_to_json_round_trips_through_json():
    d = rec.diagnosis()
    back = json.loads(json.dumps(d.to_json()))
    assert back["cases"][2]["bound"] == "pipe" and back["slower"][0]["case"] == "large"
    assert back["cases"][2]["limiter"]["key"] == "global_latency"
    assert back["peak"]["label"] == "fp32 FMA on CUDA cores"


def test_without_a_device_the_diagnosis_says_what_it_cannot_compute():
    at = rec.attempts()
    d = diagnose(rec.task(), at["a0004"]["evaluation"], initial=at["a0000"]["evaluation"])
    assert d.peak is None and d.ridge is None
    assert all(c.pct_bandwidth is None and c.pct_compute is None for c in d.cases)
    assert any("device unknown" in n for n in d.notes) and any("bandwidth unknown" in n for n in d.notes)
    assert d.case("large").vs_initial == pytest.approx(19450 / 5270)


def test_a_zero_median_is_noted_not_divided_by():
    at = rec.attempts()
    best = at["a0004"]["evaluation"]
    best["cases"][3]["timing"]["median"] = 0.0          # sq256
    init = at["a0000"]["evaluation"]
    init["cases"][4]["timing"]["median"] = 0.0          # rect
    d = diagnose(rec.task(), best, initial=init, baselines=rec.history()["baselines"], device=rec.env()["device"],
                 calibration=rec.env()["calibration"])
    assert [c.name for c in d.cases] == ["rect", "large"] and "case sq256: no positive median time" in d.notes
    assert d.case("rect").vs_initial is None and d.case("rect").vs_baselines["cublas"] == pytest.approx(10.5 / 7.0)


def test_a_profile_in_another_shape_is_read_too():
    """Stalls as plain names and occupancy as a fraction (as a scripted or recorded profiler may give)."""
    prof = {"available": True, "reason": "", "tool": "ncu (scripted)", "seconds": 1.5,
            "cases": {"large": {"dram_pct": 40.0, "l2_pct": 20.0, "sm_pct": 12.0, "achieved_occupancy": 0.8,
                                "stalls": ["lg_throttle", "long_scoreboard"]}}}
    d = rec.diagnosis(prof=prof)
    assert d.case("large").profile["achieved_occupancy_pct"] == 80.0
    assert "ncu: DRAM 40.0%, L2 20.0%, SM 12.0% of peak (SM: its busiest sub-unit, not the FMA pipe); achieved " \
           "occupancy 80.0%; top warp stalls: lg_throttle, long_scoreboard" in d.render()
    assert d.case("sq256").profile is None
    dirs = directions(d, 8)
    # a stall named without a share still names the limit (the first listed), with its advice first
    assert d.case("large").limiter["key"] == "lsu_queue"
    lim = next(x for x in dirs if x.startswith("the limit on case large"))
    assert lim.startswith("the limit on case large is the global load/store queue (lg_throttle (the top stall; no "
                          "share given)")
    assert dirs.index(lim) <= 1                # after the small grids of sq256 and rect at most


def test_a_tf32_tensor_core_kernel_of_the_fp32_task_is_measured_against_the_split_tf32_ceiling():
    """The same recorded best, said to be the 3xTF32 pattern: the roof is the TF32 tensor pipe's rate
    spent three times per product, the pipe named is the tensor pipe, and the note gives the
    tolerance argument for the split."""
    from kernel_forge.kernels.library import by_name

    at = rec.attempts()
    best = at["a0004"]["evaluation"]
    e = rec.env()
    plain = diagnose(rec.task(), best, device=e["device"], calibration=e["calibration"],
                     source=by_name("gemm_simt_warptile").source())
    assert plain.peak["key"] == "fp32"
    d = diagnose(rec.task(), best, device=e["device"], calibration=e["calibration"],
                 source=by_name("gemm_tf32x3_mma").source())
    tensor16 = e["device"]["tensor_peak"]
    assert d.peak["key"] == "tf32x3" and d.peak["flops"] == pytest.approx(tensor16 / 6)
    assert "three products" in d.tensor_note and "hi + lo" in d.tensor_note and "tolerance" in d.tensor_note
    large = d.case("large")
    assert large.pipe_busy["pipe"] == "tensor"
    assert large.pct_compute == pytest.approx(large.tflops * 1e12 / (tensor16 / 6) * 100)
    assert d.ridge == pytest.approx(tensor16 / 6 / 4.26e12)
