"""Tests of kernel_forge/analysis/case_diagnosis.py: one performance case's diagnosis record."""
from __future__ import annotations

import json
from dataclasses import asdict

from kernel_forge.analysis.case_diagnosis import CaseDiagnosis


def test_a_case_with_only_its_time_has_an_unknown_bound_and_nothing_else_measured():
    c = CaseDiagnosis("large", 5270.0)
    assert (c.name, c.median_us, c.bound, c.bound_why, c.resources_source) == ("large", 5270.0, "unknown", "", "")
    measured = ("pct_bandwidth", "pct_compute", "vs_initial", "p10_us", "p90_us", "initial_us", "gbps", "tflops",
                "intensity", "launch", "blocks", "waves", "resources", "profile", "pipe_busy", "limiter")
    assert {k: getattr(c, k) for k in measured} == dict.fromkeys(measured)
    assert (c.vs_baselines, c.vars, c.baseline_us) == ({}, {}, {})


def test_each_case_has_its_own_baselines_and_variables():
    a, b = CaseDiagnosis("a", 1.0), CaseDiagnosis("b", 2.0)
    a.vs_baselines["cublas"] = 0.5
    a.vars["n"] = 1024
    a.baseline_us["cublas"] = 0.5
    assert (b.vs_baselines, b.vars, b.baseline_us) == ({}, {}, {})


def test_a_case_goes_through_json_and_comes_back_equal():
    c = CaseDiagnosis("sq256", 6.0, pct_bandwidth=3.1, pct_compute=8.4, bound="latency",
                      bound_why="only 64 blocks for 132 SMs", vs_initial=2.54, vs_baselines={"cublas": 1.83},
                      vars={"m": 256, "n": 256, "k": 256}, p10_us=5.95, p90_us=6.05, blocks=64, waves=0.06,
                      launch={"grid": [8, 8, 1], "block": [32, 8, 1], "shared_mem": 0},
                      resources={"registers": 32, "occupancy": 1.0}, resources_source="driver",
                      profile={"stalls": [{"reason": "long_scoreboard", "share": 0.51}]},
                      limiter={"key": "global_latency", "what": "global-memory latency", "evidence": "", "advice": ""})
    back = CaseDiagnosis(**json.loads(json.dumps(asdict(c))))
    assert back == c
    assert back.launch["grid"] == [8, 8, 1]         # lists stay lists: the diagnosis' JSON is plain data
