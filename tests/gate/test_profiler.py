"""Nsight Compute profiles: the CSV parser on the H200's real output, the fallbacks when ncu is
missing, fails or is refused (fake ncu scripts on PATH), saving, and on a GPU the real thing."""
from __future__ import annotations

import json
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from kernel_forge.model.candidate import load_candidate
from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.gate.profiler import METRICS, PIPE_METRICS, _QUERIED, assign, metrics_to_ask, ncu_command, parse_csv, profile_candidate, query_metrics, refusal, refused_metrics, save_profile, summarise_row, without_raw
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
MIN_CSV = (DATA / "ncu-min-h200.csv").read_text()          # bench/evidence/h200-2026-12-01-s4/probe/ncu-min.csv
SECTIONS_CSV = (DATA / "ncu-profile-h200.csv").read_text()


@pytest.fixture
def matmul():
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    return task, load_candidate(task.initial)


# --------------------------------------------------------------------------------- parsing

def test_the_h200_csv_parses_to_the_metrics_the_diagnosis_shows():
    rows = parse_csv(MIN_CSV)
    assert len(rows) == 1 and rows[0]["Kernel Name"] == "k_mm_plain"
    assert rows[0]["device__attribute_clock_rate"] == 1_980_000.0        # thousands separators removed
    s = summarise_row(rows[0])
    assert (s["kernel"], s["grid"], s["block"]) == ("k_mm_plain", "(16, 16, 1)", "(16, 16, 1)")
    assert s["time_us"] == pytest.approx(12.672)
    assert (s["dram_pct"], s["l2_pct"], s["sm_pct"]) == (0.87, 5.74, 24.07)
    assert (s["achieved_occupancy_pct"], s["theoretical_occupancy_pct"]) == (24.06, 100.0)
    assert s["occupancy_limits"] == {"registers": 8.0, "shared_memory": 21.0, "warps": 8.0, "blocks": 32.0}
    assert (s["registers"], s["waves"]) == (32.0, 0.24)
    reasons = [x["reason"] for x in s["stalls"]]
    assert reasons == ["long_scoreboard", "barrier", "short_scoreboard", "wait", "mio_throttle"]
    assert "selected" not in reasons                                      # the issuing warp is no stall
    assert s["stalls"][0]["per_issue"] == 10.39 and s["stalls"][0]["share"] == pytest.approx(0.5144, abs=1e-4)
    assert refusal(MIN_CSV) is None


def test_every_metric_asked_for_is_in_the_probe_s_output():
    header = next(l for l in MIN_CSV.splitlines() if l.startswith('"ID"'))
    for m in METRICS:
        assert f'"{m}"' in header, m


def test_rows_are_assigned_to_cases_in_launch_order():
    rows = parse_csv(SECTIONS_CSV)
    assert [r["Grid Size"] for r in rows] == ["(4096, 1, 1)"] * 5 + ["(65536, 1, 1)"]
    plan = [{"case": "small", "launches": 5, "grid": [4096, 1, 1]}, {"case": "big", "launches": 1, "grid": [65536, 1, 1]}]
    cases, notes = assign(rows, plan)
    assert set(cases) == {"small", "big"} and notes == []
    assert cases["small"]["launches_profiled"] == 5 and cases["big"]["grid"] == "(65536, 1, 1)"
    cases, notes = assign(rows, [{"case": "a", "launches": 1, "grid": [7, 1, 1]}, {"case": "b", "launches": 9}])
    assert "case a: ncu saw grid (4096, 1, 1), the child launched [7, 1, 1]" in notes
    cases, notes = assign(rows[:1], [{"case": "a", "launches": 1}, {"case": "b", "launches": 1}])
    assert set(cases) == {"a"} and notes == ["no profiled launch for case b"]


def test_refusals_are_recognised():
    assert refusal("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
                   "NVIDIA GPU Performance Counters on the target device 0.\n").startswith("==ERROR== ERR_NVGPUCTRPERM")
    assert "LibraryNotLoaded" in refusal("==ERROR== Failed to load: LibraryNotLoaded\n")
    assert refusal("==WARNING== No kernels were profiled.\n") == "==WARNING== No kernels were profiled."
    assert refusal("==ERROR== Unknown option '--bogus'\n") == "==ERROR== Unknown option '--bogus'"


def test_the_command_has_the_flags_the_probe_used():
    cmd = ncu_command("ncu", "matmul_f32", 6, ["python", "-m", "child", "spec.json"])
    assert cmd[:2] == ["ncu", "--metrics"] and cmd[2] == ",".join(METRICS + PIPE_METRICS)
    assert ncu_command("ncu", "k", 1, ["x"], METRICS[:2])[2] == ",".join(METRICS[:2])
    i = cmd.index
    assert cmd[i("--clock-control") + 1] == "none" and cmd[i("--target-processes") + 1] == "all"
    assert cmd[i("--cache-control") + 1] == "all"
    assert cmd[i("-k") + 1] == "regex:^matmul_f32$" and cmd[i("-c") + 1] == "6"
    assert cmd[i("--csv"):i("--csv") + 3] == ["--csv", "--page", "raw"]
    assert cmd[-4:] == ["python", "-m", "child", "spec.json"]


# ------------------------------------------------------------------------------- fallbacks

def _fake_ncu(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "ncu"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


@pytest.fixture
def path_with(monkeypatch):
    def use(folder: Path | None):
        monkeypatch.delenv("KFORGE_NCU", raising=False)
        monkeypatch.setenv("PATH", str(folder) if folder else "/nonexistent-kforge")
    return use


def test_no_ncu_on_path_is_a_reason_not_an_error(matmul, path_with):
    task, cand = matmul
    path_with(None)
    p = profile_candidate(task, cand, ["sq256"], arch="sm_90")
    assert p["available"] is False and p["tool"] == "ncu" and p["cases"] == {}
    assert p["reason"] == "ncu (Nsight Compute) was not found on PATH (set KFORGE_NCU to its path)"


def test_an_unknown_case_is_a_reason(matmul, path_with):
    task, cand = matmul
    path_with(None)
    p = profile_candidate(task, cand, ["sq256", "nope"], arch="sm_90")
    assert p["available"] is False and p["reason"] == "no case named nope in task matmul_f32"
    assert profile_candidate(task, cand, ["holdout"], arch="sm_90")["reason"] == "no case to profile"


def test_counters_refused_gives_ncu_s_own_words(matmul, path_with, tmp_path):
    task, cand = matmul
    path_with(_fake_ncu(tmp_path / "bin", """
        import sys
        print("==PROF== Connected to process 1")
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
              "Counters on the target device 0.", file=sys.stderr)
        sys.exit(1)
    """))
    p = profile_candidate(task, cand, ["sq256", "large"], arch="sm_90")
    assert p["available"] is False and p["reason"].startswith("==ERROR== ERR_NVGPUCTRPERM - The user does not have")
    assert p["seconds"] >= 0 and p["cases"] == {}


def test_a_failing_ncu_says_its_status_and_last_line(matmul, path_with, tmp_path):
    task, cand = matmul
    path_with(_fake_ncu(tmp_path / "bin", """
        import sys
        print("something broke in the profiler", file=sys.stderr)
        sys.exit(3)
    """))
    p = profile_candidate(task, cand, ["sq256"], arch="sm_90")
    assert p["available"] is False
    assert p["reason"] == "ncu exited with status 3 and profiled no kernel: something broke in the profiler"


def test_a_hanging_ncu_times_out(matmul, path_with, tmp_path):
    task, cand = matmul
    path_with(_fake_ncu(tmp_path / "bin", "import time\ntime.sleep(30)\n"))
    p = profile_candidate(task, cand, ["sq256"], arch="sm_90", timeout_s=1)
    assert p["available"] is False and p["reason"] == "ncu did not finish within 1 s"


def test_a_profiled_process_that_fails_is_reported(matmul, path_with, tmp_path):
    task, cand = matmul
    path_with(_fake_ncu(tmp_path / "bin", """
        import json, sys
        spec = json.load(open(sys.argv[-1]))
        json.dump({"plan": [], "error": "NoGPUError: the driver reports no CUDA device"}, open(spec["status"], "w"))
        print("==PROF== Disconnected")
    """))
    p = profile_candidate(task, cand, ["sq256"], arch="sm_90")
    assert p == {**p, "available": False, "reason": "the profiled process failed: NoGPUError: the driver reports no CUDA device"}


def test_a_working_ncu_gives_one_summary_per_case(matmul, path_with, tmp_path):
    """A stand-in ncu that checks the command line, reads the child's spec, and answers with the
    probe's real CSV row twice per case (the kernel renamed)."""
    task, cand = matmul
    csv = json.dumps(MIN_CSV.replace('"k_mm_plain"', '"matmul_f32"'))
    path_with(_fake_ncu(tmp_path / "bin", f"""
        import json, sys
        args = sys.argv[1:]
        assert args[args.index("-k") + 1] == "regex:^matmul_f32$", args
        assert args[args.index("-c") + 1] == "4", args
        assert args[-3:-1] == ["-m", "kernel_forge.gpu.profile_child"], args
        spec = json.load(open(args[-1]))
        assert spec["cases"] == ["sq256", "rect"] and spec["launches"] == 2 and spec["arch"] == "sm_90"
        assert "matmul_f32" in spec["source"] and spec["seed"] == 5
        plan = [{{"case": c, "launches": 2, "grid": [16, 16, 1]}} for c in spec["cases"]]
        json.dump({{"plan": plan, "error": None}}, open(spec["status"], "w"))
        text = {csv}
        lines = text.splitlines()
        head = [l for l in lines if not (l.startswith('"0"'))]
        row = next(l for l in lines if l.startswith('"0"'))
        print("\\n".join(l for l in head if l.startswith(("==", '"ID"', '""'))))
        for i in range(4):
            print(row.replace('"0"', '"%d"' % i, 1))
    """))
    p = profile_candidate(task, cand, ["sq256", "rect", "holdout"], arch="sm_90", seed=5)
    assert p["available"] is True and p["reason"] == "" and p["notes"] == []
    assert set(p["cases"]) == {"sq256", "rect"}                       # a holdout case is never profiled
    assert p["cases"]["sq256"]["sm_pct"] == 24.07 and p["cases"]["rect"]["launches_profiled"] == 2
    assert p["raw"].count("matmul_f32") >= 4 and p["command"][0] == "ncu"


def test_the_gate_profiles_through_this_module(matmul, path_with):
    task, cand = matmul
    path_with(None)
    gate = Gate(task, GateOptions(arch="sm_90"))
    try:
        p = gate.profile(cand, ["sq256"])
    finally:
        gate.close()
    assert p["available"] is False and "not found on PATH" in p["reason"]


def test_save_profile_writes_the_summary_and_the_raw_csv(tmp_path):
    run = RunDir(tmp_path)
    prof = {"available": True, "reason": "", "tool": "ncu", "seconds": 3.2, "cases": {"sq256": {"sm_pct": 24.0}},
            "raw": MIN_CSV}
    name = save_profile(run, "a0004", prof)
    assert name == "profiles/a0004.json"
    saved = json.loads((tmp_path / name).read_text())
    assert "raw" not in saved and saved["raw_file"] == "profiles/a0004.ncu.csv" and saved["attempt"] == "a0004"
    assert (tmp_path / "profiles" / "a0004.ncu.csv").read_text() == MIN_CSV
    assert without_raw(prof) == {k: v for k, v in prof.items() if k != "raw"} and without_raw(None) is None
    save_profile(run, "a0005", {"available": False, "reason": "no ncu", "tool": "ncu", "seconds": 0.0, "cases": {}})
    assert not (tmp_path / "profiles" / "a0005.ncu.csv").exists()


# ------------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name, cases", [("matmul_f32", ["sq256", "large"]), ("softmax_rows", ["sq4096", "r16k_c1k"])])
def test_profile_of_the_naive_kernel_on_the_gpu(name, cases):
    task = load_task(ROOT / "manifests" / f"{name}.json")
    cand = load_candidate(task.initial)
    with Gate(task, GateOptions()) as gate:
        p = gate.profile(cand, cases)
    print(f"\nPROFILE {name} naive: available={p['available']} {p['seconds']:.1f} s "
          f"{p['reason']}\n" + json.dumps(without_raw(p)["cases"], indent=1))
    if not p["available"]:
        assert p["reason"], "a profile that is not available says why"
        return
    assert set(p["cases"]) == set(cases) and p["notes"] == []
    for c in cases:
        s = p["cases"][c]
        assert s["kernel"] == name
        assert s["dram_pct"] is not None and 0 <= s["dram_pct"] <= 100
        assert s["sm_pct"] is not None and 0 < s["sm_pct"] <= 100
        assert s["achieved_occupancy_pct"] is not None and s["stalls"]
        assert s["time_us"] > 0 and s["launches_profiled"] == 2
    assert p["seconds"] < 120


# ------------------------------------------------------------------------- the pipe metrics

def test_the_pipe_metrics_are_read_into_named_fields_and_missing_ones_are_listed():
    rows = parse_csv(MIN_CSV)
    row = dict(rows[0])
    s = summarise_row(row)
    # the probe's row predates the pipe metrics: every one is named as missing, none is invented
    assert s["metrics_missing"] == list(PIPE_METRICS)
    assert s["fma_pipe_pct"] is None and s["shared_ld_conflicts"] is None and s["l2_hit_pct"] is None
    row.update({"sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": 17.3,
                "smsp__inst_executed_op_shared_ld.sum": 5.0e6,
                "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 1.0e6,
                "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 6.0e6,
                "sm__mio_inst_issued.avg.pct_of_peak_sustained_active": 61.0,
                "lts__t_sector_hit_rate.pct": 88.5})
    s = summarise_row(row)
    assert (s["fma_pipe_pct"], s["mio_issue_pct"], s["l2_hit_pct"]) == (17.3, 61.0, 88.5)
    assert (s["shared_ld_instructions"], s["shared_ld_wavefronts"], s["shared_ld_conflicts"]) == (5e6, 6e6, 1e6)
    assert "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active" not in s["metrics_missing"]
    assert "sm__issue_active.avg.pct_of_peak_sustained_active" in s["metrics_missing"]


def test_only_the_pipe_metrics_this_gpu_lists_are_asked_for():
    listed = frozenset(m.split(".")[0] for m in METRICS + PIPE_METRICS
                       if "gmma" not in m and "lts__t_sector_hit_rate" not in m)
    ask, missing = metrics_to_ask(listed)
    assert missing == ["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                       "lts__t_sector_hit_rate.pct"]
    assert ask[:len(METRICS)] == list(METRICS) and not set(missing) & set(ask)
    assert metrics_to_ask(None) == (list(METRICS + PIPE_METRICS), [])      # unknown: ask for all, fall back


def test_a_refused_metric_name_is_recognised_by_full_or_base_name():
    asked = list(METRICS + PIPE_METRICS)
    out = "==PROF== Connected\n==ERROR== Failed to find metric sm__pipe_tensor_op_gmma_cycles_active\n"
    assert refused_metrics(out, asked) == ["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"]
    assert refused_metrics("==ERROR== Invalid metrics requested\n", asked) == list(PIPE_METRICS)
    assert refused_metrics("==ERROR== ERR_NVGPUCTRPERM - no permission\n", asked) == []


def test_the_metric_query_is_parsed_and_an_unrecognisable_one_is_not_trusted(tmp_path, monkeypatch):
    listing = "\n".join(["Device NVIDIA H200 (GH100)", "-" * 20, "Metric Name   Metric Description"]
                        + [f"{m.split('.')[0]}   some description" for m in METRICS + PIPE_METRICS[:3]])
    good = _fake_ncu(tmp_path / "good", f"print({listing!r})\n") / "ncu"
    bad = _fake_ncu(tmp_path / "bad", "print('nothing useful here')\n") / "ncu"
    _QUERIED.clear()
    names = query_metrics(str(good))
    assert names is not None and "sm__pipe_fma_cycles_active" in names and "lts__t_sector_hit_rate" not in names
    assert query_metrics(str(bad)) is None
    _QUERIED.clear()


def test_a_profile_without_ncu_still_carries_the_instruction_mix(matmul, path_with):
    pytest.importorskip("cuda.bindings.nvrtc")
    task, cand = matmul
    path_with(None)
    p = profile_candidate(task, cand, ["sq256"], arch="sm_90")
    assert p["available"] is False
    mix = p["instruction_mix"]
    assert mix["source"] in ("sass", "ptx") and mix["kernel"]["ffma"] >= 1 and mix["kernel"]["ldg"] >= 2
    assert profile_candidate(task, cand, ["sq256"], arch="sm_90", with_mix=False).get("instruction_mix") is None


def test_ncu_refusing_a_pipe_metric_falls_back_to_the_core_metrics(matmul, path_with, tmp_path):
    """A stand-in ncu that lists no metrics, refuses any pipe metric by name, and answers the core
    metrics with the probe's row: the profile is available and says which metrics it lacks."""
    task, cand = matmul
    csv = json.dumps(MIN_CSV.replace('"k_mm_plain"', '"matmul_f32"'))
    path_with(_fake_ncu(tmp_path / "bin", f"""
        import json, sys
        args = sys.argv[1:]
        if args == ["--query-metrics"]:
            sys.exit(1)
        metrics = args[args.index("--metrics") + 1].split(",")
        if "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active" in metrics:
            print("==ERROR== Failed to find metric sm__pipe_fma_cycles_active", file=sys.stderr)
            sys.exit(1)
        spec = json.load(open(args[-1]))
        json.dump({{"plan": [{{"case": "sq256", "launches": 2}}], "error": None}}, open(spec["status"], "w"))
        lines = {csv}.splitlines()
        row = next(l for l in lines if l.startswith('"0"'))
        print("\\n".join(l for l in lines if l.startswith(('"ID"', '""'))))
        print(row)
        print(row.replace('"0"', '"1"', 1))
    """))
    _QUERIED.clear()
    p = profile_candidate(task, cand, ["sq256"], arch="sm_90", with_mix=False)
    _QUERIED.clear()
    assert p["available"] is True and p["cases"]["sq256"]["sm_pct"] == 24.07
    assert set(p["metrics_missing"]) == set(PIPE_METRICS)
    assert p["command"][2] == ",".join(METRICS)
