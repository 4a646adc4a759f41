"""Tests of kernel_forge/analysis/profile_reading.py: a case's profile summary read in one shape."""
from __future__ import annotations

from kernel_forge.analysis.profile_reading import normalise_case, stall_text


def test_no_summary_is_none():
    assert normalise_case(None) is None
    assert normalise_case({}) is None


def test_an_occupancy_fraction_becomes_a_percentage_and_a_percentage_stays_one():
    assert normalise_case({"achieved_occupancy": 0.8})["achieved_occupancy_pct"] == 80.0
    assert normalise_case({"achieved_occupancy": 1})["achieved_occupancy_pct"] == 100.0
    assert normalise_case({"achieved_occupancy": 46.3})["achieved_occupancy_pct"] == 46.3     # over 1: a percentage
    # the profiler's own percentage is kept, whatever else the summary holds
    assert normalise_case({"achieved_occupancy_pct": 12.5, "achieved_occupancy": 0.9})["achieved_occupancy_pct"] == 12.5
    assert "achieved_occupancy_pct" not in normalise_case({"dram_pct": 4.2})      # no occupancy: none made up


def test_stalls_named_plainly_get_no_share_and_unreadable_ones_are_dropped():
    summary = {"dram_pct": 40.0, "stalls": ["lg_throttle", {"reason": "barrier", "share": 0.17},
                                            {"share": 0.3}, 7, {"reason": "", "share": 0.1}]}
    out = normalise_case(summary)
    assert out["stalls"] == [{"reason": "lg_throttle", "share": None}, {"reason": "barrier", "share": 0.17}]
    assert out["dram_pct"] == 40.0
    assert normalise_case({"dram_pct": 1.0})["stalls"] == []
    # the summary it was given is left as it was
    assert summary["stalls"][0] == "lg_throttle" and "achieved_occupancy_pct" not in summary


def test_stall_text_names_the_top_stalls_with_their_shares():
    stalls = [{"reason": "long_scoreboard", "share": 0.514}, {"reason": "barrier", "share": 0.166},
              {"reason": "wait", "share": None}, {"reason": "mio_throttle", "share": 0.05},
              {"reason": "drain", "share": 0.01}]
    assert stall_text(stalls) == "long_scoreboard 51%, barrier 17%, wait, mio_throttle 5%"
    assert stall_text(stalls, top=1) == "long_scoreboard 51%"
    assert stall_text([]) == ""
