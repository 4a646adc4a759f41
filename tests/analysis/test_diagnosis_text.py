"""Tests of kernel_forge/analysis/diagnosis_text.py: one case's diagnosis as the prompt shows it."""
from __future__ import annotations

from kernel_forge.analysis.case_diagnosis import CaseDiagnosis
from kernel_forge.analysis.diagnosis_text import case_line, us


def test_a_time_keeps_the_digits_that_matter():
    assert [us(x) for x in (6.0, 15.256, 99.5)] == ["6.00", "15.26", "99.50"]          # below 100 µs: 2 decimals
    assert [us(x) for x in (100.0, 5270.0, 9999.94)] == ["100.0", "5270.0", "9999.9"]   # below 10 ms: 1
    assert [us(x) for x in (10000.0, 25490.4)] == ["10000", "25490"]                   # then whole µs


def test_a_case_with_only_its_time_says_its_size_and_that_its_bound_is_unknown():
    assert case_line(CaseDiagnosis("small", 12.5, vars={"n": 1024}), None) == "- small (n=1024): 12.50 µs; unknown-bound"
    assert case_line(CaseDiagnosis("one", 3.0, p10_us=2.5, p90_us=3.25), None) == \
        "- one: 3.00 µs (p10 2.50, p90 3.25); unknown-bound"


def test_the_roofline_figures_the_bound_and_the_references_are_one_line():
    c = CaseDiagnosis("large", 10.0, vars={"m": 64, "n": 32}, pct_bandwidth=40.0, pct_compute=12.5, intensity=2.0,
                      bound="memory", bound_why="40% of bandwidth", vs_baselines={"cublas": 0.5},
                      baseline_us={"cublas": 5.0}, vs_initial=2.0, initial_us=20.0)
    assert case_line(c, {"key": "fp32"}) == (
        "- large (m=64, n=32): 10.00 µs; 40.0% of bandwidth, 12.5% of the fp32 peak, 2.0 FLOP/byte; "
        "memory-bound (40% of bandwidth); vs cublas 5.00 µs: x0.50 (slower); vs initial 20.00 µs: x2.00")
    # with no peak known, no share of it is shown
    assert "of the fp32 peak" not in case_line(c, None) and "40.0% of bandwidth, 2.0 FLOP/byte" in case_line(c, None)


def test_a_pipe_bound_case_names_its_limit_and_a_short_last_wave_its_idle_tail():
    c = CaseDiagnosis("large", 5270.0, bound="pipe", bound_why="682.7 FLOP/byte >= ridge 15.7",
                      pipe_busy={"pct": 39.0, "pipe": "FMA"}, blocks=158, waves=1.2,
                      limiter={"key": "global_latency", "what": "global-memory latency",
                               "evidence": "long_scoreboard 51% of stalled warps", "advice": "..."})
    # 1.2 waves: two waves, the last 20 % full, so (2 - 1.2) / 2 = 40 % of the SM time idles in the tail
    assert case_line(c, None) == (
        "- large: 5270.0 µs; limited by global-memory latency (long_scoreboard 51% of stalled warps) — below the FMA "
        "roof, not compute-bound, although 682.7 FLOP/byte >= ridge 15.7; 1.20 waves of 158 blocks: the last wave is "
        "20% full, so about 40% of the SM time is idle in the tail")
    c.waves = 1.95                               # the last wave 95 % full: no tail worth a word
    assert "waves" not in case_line(c, None)


def test_resources_and_the_profile_get_a_line_each():
    c = CaseDiagnosis("k", 50.0, bound="latency", resources_source="computed",
                      resources={"registers": 64, "spill_stores": 8, "spill_loads": 4, "static_smem": 4096,
                                 "dynamic_smem": 0, "blocks_per_sm": 2, "threads_per_block": 256, "warps_per_sm": 16,
                                 "occupancy": 0.25, "occupancy_limiter": "registers"},
                      profile={"dram_pct": 80.0, "l2_pct": 30.5, "fma_pipe_pct": 12.0, "tensor_hmma_pct": 3.0,
                               "tensor_gmma_pct": 7.5, "achieved_occupancy_pct": 45.0,
                               "stalls": [{"reason": "long_scoreboard", "share": 0.6}, {"reason": "barrier"}]})
    head, res, prof = case_line(c, None).split("\n")
    assert head == "- k: 50.00 µs; latency-bound"
    assert res == ("  resources (computed): 64 registers/thread, 8 B spill stores + 4 B spill loads, shared memory "
                   "4096 B static + 0 B dynamic per block; 2 blocks of 256 threads (16 warps) per SM = 25% theoretical "
                   "occupancy, limited by registers")
    # no SM figure: "?" and no word on what SM means; the tensor pipe is the busier of its two measures
    assert prof == ("  ncu: DRAM 80.0%, L2 30.5%, SM ? of peak; FMA pipe 12.0%, tensor pipe 7.5%; achieved occupancy "
                    "45.0%; top warp stalls: long_scoreboard 60%, barrier")
