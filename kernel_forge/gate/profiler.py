"""Nsight Compute (``ncu``) profiles of one candidate, summarised per case for the diagnosis.

:func:`profile_candidate` runs ``ncu`` on a child process (:mod:`kernel_forge.gpu.profile_child`)
that compiles the candidate and launches it a few times on each requested case, with the inputs
the gate draws first.  ncu runs with ``--clock-control none`` (the clocks the gate times at),
``--cache-control all`` (caches flushed before every profiled pass, as the gate's cold L2),
``--target-processes all``, ``-k regex:^ENTRY$`` and ``-c N`` (the launches the child makes), and
prints ``--csv --page raw``; :func:`parse_csv` reads that and :func:`summarise_row` keeps what the
diagnosis (:mod:`kernel_forge.analysis`) shows: DRAM, L2 and SM throughput as % of peak, achieved and theoretical occupancy, the
occupancy limits, the top warp-stall reasons, and the metrics that tell the pipes apart
(:data:`PIPE_METRICS`: FMA and tensor pipe use, LSU, MIO and issue-slot use, shared-memory
wavefronts and bank conflicts, L1/L2 hit rates).  The pipe metrics are asked for only where
this ncu lists them for the GPU (``ncu --query-metrics``); one that is missing is named in the
answer (``metrics_missing``), and if ncu still refuses a metric name the run is repeated with
the core :data:`METRICS` alone.  Where ncu is missing, fails, or the counters are refused
(``ERR_NVGPUCTRPERM``, ``LibraryNotLoaded``), the answer is ``{"available": False, "reason":
<what ncu said>}``, never an exception.  Every answer also carries the candidate's instruction
mix (:mod:`kernel_forge.gpu.instruction_mix`, from its CUBIN or PTX; no GPU needed).
:func:`save_profile` writes the summary to ``profiles/<attempt>.json`` and ncu's raw CSV beside it.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernel_forge.common.writes import write_text
from kernel_forge.gpu.instruction_mix import mix_for_candidate

TOOL = "ncu"
#: metrics asked for: the probe's list, every one accepted on the H200 (bench/evidence/h200-2026-12-01-s4/
#: probe); ncu's raw page adds the launch__* and device__attribute_* values (occupancy limits, waves) by itself
METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__occupancy_limit_registers",
    "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
) + tuple(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in (
    "long_scoreboard", "barrier", "mio_throttle", "short_scoreboard", "math_pipe_throttle", "lg_throttle", "wait",
    "not_selected", "selected", "dispatch_stall", "drain", "imc_miss", "membar", "no_instruction", "sleeping",
    "tex_throttle", "branch_resolving", "misc"))
#: the metrics that tell the pipes apart (names as ncu 2023+ spells them for sm_70 and later); each
#: is asked for only where ``ncu --query-metrics`` lists its base name for the GPU
PIPE_METRICS = (
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
    "sm__mio_inst_issued.avg.pct_of_peak_sustained_active",
    "sm__issue_active.avg.pct_of_peak_sustained_active",
    "smsp__warps_eligible.avg.per_cycle_active",
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
    "l1tex__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.pct",
)
#: summary key -> the metric it reads (PIPE_METRICS)
PIPE_FIELDS = {
    "fma_pipe_pct": PIPE_METRICS[0], "fma_issue_pct": PIPE_METRICS[1], "tensor_hmma_pct": PIPE_METRICS[2],
    "tensor_gmma_pct": PIPE_METRICS[3], "alu_issue_pct": PIPE_METRICS[4], "xu_issue_pct": PIPE_METRICS[5],
    "lsu_issue_pct": PIPE_METRICS[6], "mio_issue_pct": PIPE_METRICS[7], "issue_active_pct": PIPE_METRICS[8],
    "eligible_warps": PIPE_METRICS[9], "shared_ld_instructions": PIPE_METRICS[10],
    "shared_st_instructions": PIPE_METRICS[11], "shared_ld_wavefronts": PIPE_METRICS[12],
    "shared_st_wavefronts": PIPE_METRICS[13], "shared_ld_conflicts": PIPE_METRICS[14],
    "shared_st_conflicts": PIPE_METRICS[15], "shared_pipe_pct": PIPE_METRICS[16], "l1_hit_pct": PIPE_METRICS[17],
    "l2_hit_pct": PIPE_METRICS[18],
}
_METRIC_NAME = re.compile(r"^\s*([a-z][a-z0-9]*__[a-z0-9_]+)\b")
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
#: not stalls: "selected" is the issuing warp itself
_NOT_A_STALL = {"selected"}
#: lines in ncu's output that mean the counters could not be read
_REFUSALS = ("ERR_NVGPUCTRPERM", "LibraryNotLoaded", "Profiling is not supported",
             "insufficient privilege", "not supported on this device")
_NUMBER = re.compile(r"^-?[0-9][0-9,]*(\.[0-9]+)?([eE][-+]?[0-9]+)?$")


def unavailable(reason: str, seconds: float = 0.0, **extra) -> dict:
    return {"available": False, "reason": reason, "tool": TOOL, "seconds": round(seconds, 3), "cases": {}, **extra}


def find_ncu() -> str | None:
    """``$KFORGE_NCU`` if set, else ``ncu`` on PATH."""
    explicit = os.environ.get("KFORGE_NCU")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return shutil.which("ncu")


def base_name(metric: str) -> str:
    """``sm__pipe_fma_cycles_active`` for ``sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active``."""
    return metric.split(".", 1)[0]


_QUERIED: dict[str, frozenset | None] = {}


def query_metrics(ncu: str, timeout_s: float = 60.0) -> frozenset | None:
    """The base metric names ``ncu --query-metrics`` lists for this machine's GPU (cached per ncu
    path for the process), or None when it lists nothing recognisable (no GPU, an old ncu, a
    refusal): then every metric is asked for and a refused name makes the run fall back."""
    if ncu in _QUERIED:
        return _QUERIED[ncu]
    try:
        p = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=timeout_s)
        names = frozenset(m.group(1) for l in (p.stdout or "").splitlines() if (m := _METRIC_NAME.match(l)))
    except (OSError, subprocess.TimeoutExpired):
        names = frozenset()
    # a listing that lacks the core metrics this module has always read is not one to trust
    found = names if names and all(base_name(m) in names for m in METRICS[:4]) else None
    _QUERIED[ncu] = found
    return found


def metrics_to_ask(available: frozenset | None) -> tuple[list[str], list[str]]:
    """(metrics to ask for, pipe metrics left out because this GPU's ncu does not list them)."""
    if available is None:
        return list(METRICS + PIPE_METRICS), []
    missing = [m for m in PIPE_METRICS if base_name(m) not in available]
    return list(METRICS) + [m for m in PIPE_METRICS if m not in missing], missing


def ncu_command(ncu: str, entry: str, count: int, target: list[str], metrics=None) -> list[str]:
    metrics = list(METRICS + PIPE_METRICS) if metrics is None else list(metrics)
    return [ncu, "--metrics", ",".join(metrics), "--clock-control", "none", "--cache-control", "all",
            "--target-processes", "all",
            "-k", f"regex:^{re.escape(entry)}$", "-c", str(int(count)), "--csv", "--page", "raw", *target]


# -- parsing ----------------------------------------------------------------------------------
def _value(text: str):
    t = text.strip()
    if _NUMBER.match(t):
        return float(t.replace(",", ""))
    return t


def parse_csv(text: str) -> list[dict]:
    """The kernel rows of ``ncu --csv --page raw`` output (ncu's own ``==PROF==`` lines and the
    target's output are skipped); numbers become floats (thousands separators removed); the
    units row is dropped."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    if start is None:
        return []
    body = [l for l in lines[start:] if l.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    if not rows:
        return []
    head, out = rows[0], []
    for r in rows[1:]:
        if len(r) != len(head):
            continue
        if r[0] == "":   # the units row
            continue
        out.append({h: _value(v) for h, v in zip(head, r)})
    return out


def _num(row: dict, key: str):
    v = row.get(key)
    return v if isinstance(v, float) else None


def summarise_row(row: dict, top: int = 5) -> dict:
    """What the diagnosis shows of one profiled launch."""
    stalls = {}
    for k, v in row.items():
        m = _STALL.match(k)
        if m and isinstance(v, float) and m.group(1) not in _NOT_A_STALL:
            stalls[m.group(1)] = v
    total = sum(stalls.values())
    ranked = sorted(stalls.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    t = _num(row, "gpu__time_duration.sum")
    limits = {name: _num(row, f"launch__occupancy_limit_{key}") for name, key in (
        ("registers", "registers"), ("shared_memory", "shared_mem"), ("warps", "warps"), ("blocks", "blocks"))}
    return {
        "kernel": row.get("Kernel Name", ""), "grid": row.get("Grid Size", ""), "block": row.get("Block Size", ""),
        "time_us": None if t is None else t / 1000.0,
        "dram_pct": _num(row, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "l2_pct": _num(row, "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
        "sm_pct": _num(row, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "achieved_occupancy_pct": _num(row, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        "theoretical_occupancy_pct": _num(row, "sm__maximum_warps_per_active_cycle_pct"),
        "registers": _num(row, "launch__registers_per_thread"),
        "waves": _num(row, "launch__waves_per_multiprocessor"),
        "occupancy_limits": {k: v for k, v in limits.items() if v is not None},
        "stalls": [{"reason": k, "per_issue": round(v, 4), "share": round(v / total, 4) if total else 0.0}
                   for k, v in ranked],
        **{k: _num(row, metric) for k, metric in PIPE_FIELDS.items()},
        "metrics_missing": [m for m in PIPE_METRICS if _num(row, m) is None],
    }


def _dims(text) -> list[int] | None:
    nums = re.findall(r"\d+", str(text))
    return [int(x) for x in nums] if nums else None


def assign(rows: list[dict], plan: list[dict]) -> tuple[dict[str, dict], list[str]]:
    """Per case, the summary of its last profiled launch (rows come in launch order); notes
    where the rows and the child's plan disagree."""
    cases, notes, i = {}, [], 0
    for step in plan:
        group = rows[i:i + int(step["launches"])]
        i += int(step["launches"])
        if not group:
            notes.append(f"no profiled launch for case {step['case']}")
            continue
        s = summarise_row(group[-1])
        s["launches_profiled"] = len(group)
        grid = _dims(s["grid"])
        if grid and step.get("grid") and grid[:len(step["grid"])] != list(step["grid"])[:len(grid)]:
            notes.append(f"case {step['case']}: ncu saw grid {s['grid']}, the child launched {step['grid']}")
        cases[step["case"]] = s
    return cases, notes


def refusal(text: str) -> str | None:
    """ncu's error lines when it could not profile (``==ERROR==`` lines, counters refused, no
    kernel profiled), or None."""
    errors = [l.strip() for l in text.splitlines() if l.startswith("==ERROR==")]
    for marker in _REFUSALS:
        for l in text.splitlines():
            if marker in l:
                return l.strip()
    if errors:
        return " ".join(errors[:3])
    for l in text.splitlines():
        if "No kernels were profiled" in l:
            return l.strip()
    return None


def refused_metrics(output: str, asked: list[str]) -> list[str]:
    """The asked-for metrics that an ``==ERROR==`` line of ncu's output names (by full or base
    name), or every non-core metric when an error line is about metrics without naming one."""
    errors = [l for l in output.splitlines() if l.startswith("==ERROR==")]
    named = [m for m in asked if any(m in l or base_name(m) in l for l in errors)]
    if named:
        return named
    if any("metric" in l.lower() for l in errors):
        return [m for m in asked if m not in METRICS]
    return []


# -- running ----------------------------------------------------------------------------------
def _child_env() -> dict:
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def profile_candidate(task, candidate, cases: list[str], *, arch: str, seed: int = 0, device: int = 0,
                      launches: int = 2, timeout_s: float = 300.0, ncu: str | None = None,
                      with_mix: bool = True) -> dict:
    """Profile ``candidate`` on ``cases`` of ``task`` under ncu (see the module docstring).
    The answer has ``available``, ``reason``, ``tool``, ``seconds`` (ncu's wall time, the
    target's start-up included), ``cases`` ({name: :func:`summarise_row`}), ``notes``, and
    ``raw`` (ncu's CSV output, for :func:`save_profile`), ``metrics_missing`` (pipe metrics this
    GPU's ncu does not have) and ``instruction_mix`` (:func:`~kernel_forge.gpu.instruction_mix.mix_for_candidate`;
    ``with_mix=False`` leaves it out)."""
    t0 = time.perf_counter()
    names = {c.name: c for c in task.cases}
    unknown = [c for c in cases if c not in names]
    if unknown:
        return unavailable(f"no case named {', '.join(unknown)} in task {task.name}")
    shown = [c for c in cases if names[c].role != "holdout"]
    if not shown:
        return unavailable("no case to profile")
    mix = {"instruction_mix": mix_for_candidate(candidate, task.signature.name, arch,
                                                headers=task.header_sources())} if with_mix else {}
    ncu = ncu or find_ncu()
    if not ncu:
        return unavailable("ncu (Nsight Compute) was not found on PATH (set KFORGE_NCU to its path)", **mix)
    available = query_metrics(ncu, timeout_s=min(60.0, timeout_s))
    metrics, left_out = metrics_to_ask(available)
    with tempfile.TemporaryDirectory(prefix="kforge-ncu-") as tmp:
        status_path = Path(tmp) / "status.json"
        spec = {"manifest": str(Path(task.path).resolve()), "source": candidate.source, "defines": candidate.compile_defines(),
                "launch": candidate.launch.to_json() if candidate.launch else None, "cases": shown, "seed": seed,
                "device": device, "arch": arch, "launches": launches, "status": str(status_path),
                "file_label": Path(candidate.name).name if str(candidate.name).endswith(".cu") else "kernel.cu"}
        spec_path = Path(tmp) / "spec.json"
        write_text(spec_path, json.dumps(spec))
        target = [sys.executable, "-m", "kernel_forge.gpu.profile_child", str(spec_path)]
        for attempt in (0, 1):
            cmd = ncu_command(ncu, task.signature.name, len(shown) * launches, target, metrics)
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=_child_env())
            except subprocess.TimeoutExpired:
                return unavailable(f"ncu did not finish within {timeout_s:.0f} s", time.perf_counter() - t0, **mix)
            except OSError as exc:
                return unavailable(f"ncu could not be started ({exc.strerror or exc})", time.perf_counter() - t0,
                                   **mix)
            refused = refused_metrics(p.stdout + "\n" + p.stderr, metrics) if not parse_csv(p.stdout or "") else []
            if attempt or not refused:
                break
            # ncu refused a metric name: the core metrics alone, and say which were left out
            left_out = sorted(set(left_out) | {m for m in metrics if m not in METRICS})
            metrics = list(METRICS)
        try:
            status = json.loads(status_path.read_text())
        except (OSError, ValueError):
            status = None
    seconds = time.perf_counter() - t0
    output = (p.stdout or "") + "\n" + (p.stderr or "")
    rows = parse_csv(p.stdout or "")
    extra = {"raw": p.stdout or "", "command": [Path(cmd[0]).name, *cmd[1:-1]], "metrics_missing": left_out, **mix}
    if status and status.get("error"):
        return unavailable(f"the profiled process failed: {status['error']}", seconds, **extra)
    if not rows:
        why = refusal(output)
        if why is None:
            tail = [l for l in output.strip().splitlines() if l.strip()][-1:] or ["no output"]
            why = f"ncu exited with status {p.returncode} and profiled no kernel: {tail[0].strip()}"
        return unavailable(why, seconds, **extra)
    plan = (status or {}).get("plan") or [{"case": c, "launches": launches} for c in shown]
    per_case, notes = assign(rows, plan)
    return {"available": True, "reason": "", "tool": TOOL, "seconds": round(seconds, 3), "cases": per_case,
            "notes": notes, **extra}


def save_profile(run_dir, attempt_id: str, profile: dict) -> str:
    """Write ``profiles/<attempt>.json`` (the summary, without the raw CSV) and, when there is
    one, ``profiles/<attempt>.ncu.csv``; return the JSON file's name in the run folder."""
    summary = {k: v for k, v in profile.items() if k != "raw"}
    summary["attempt"] = attempt_id
    if profile.get("raw"):
        run_dir.write_text(f"profiles/{attempt_id}.ncu.csv", profile["raw"])
        summary["raw_file"] = f"profiles/{attempt_id}.ncu.csv"
    name = f"profiles/{attempt_id}.json"
    run_dir.write_json(name, summary)
    return name


def without_raw(profile: dict | None) -> dict | None:
    """The profile as the prompt and the diagnosis take it (no raw CSV)."""
    if profile is None:
        return None
    return {k: v for k, v in profile.items() if k != "raw"}
