"""Writes tests/data/matmul_f32/run-001/: a recorded run of matmul_f32 for the CPU prompt and diagnosis tests.

Run from the repository root (needs NVRTC, no GPU): ``python tests/data/make_recorded_run.py``.

What is real: every source, the NVRTC compile logs (ptxas registers / shared memory, and the
compile error of a0001 with its line), the launches, the device (kernel_forge/data/devices/h200.json)
and the ncu metric row (the H200 probe's k_mm_plain row, relabelled per case).  What is made up:
the timings (chosen near what the H200 measured for kernels like these, so that the best is
x1.15 vs cuBLAS overall and x0.55 on the 4096^3 case, as issue 9 describes), the mismatch and the
model calls (tokens and cost in the state; no model-NNN.json is written).  The run is finished the
way the loop finishes one: ``Optimizer._finish`` over the recorded verdicts (``RecordedGate``)
writes best.cu, the replay requests, summary.json and report.md, so every file matches today's
schemas (``tests/app/test_package_data.py`` checks that; rerun this script when a schema changes).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernel_forge.model.candidate import Candidate, load_candidate, parse_candidate  # noqa: E402
from kernel_forge.evidence.run_dir import RunDir  # noqa: E402
from kernel_forge.config.gate_settings import GateOptions  # noqa: E402
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.search.loop import Optimizer
from kernel_forge.records.attempt import Attempt  # noqa: E402
from kernel_forge.config.proposer import ProposerConfig  # noqa: E402
from kernel_forge.app.run_setup import harness_hash  # noqa: E402
from kernel_forge.gate.recorded import RecordedGate  # noqa: E402
from kernel_forge.gpu.device_description import load, shipped  # noqa: E402
from kernel_forge.common.errors import CompileError  # noqa: E402
from kernel_forge.gpu.nvrtc import compile_source  # noqa: E402
from kernel_forge.model.occupancy import resources_for_case  # noqa: E402
from kernel_forge.gate.profiler import parse_csv, summarise_row  # noqa: E402
from kernel_forge.common.stats import geomean, summarize  # noqa: E402
from kernel_forge.model.task import load_task  # noqa: E402
from kernel_forge.model.verdict import CaseResult, Evaluation  # noqa: E402

OUT = ROOT / "tests" / "data" / "matmul_f32" / "run-001"
TASK = load_task(ROOT / "manifests" / "matmul_f32.json")
DEVICE, CAL = load(shipped("h200"))


def samples(median: float, n: int = 21, spread: float = 0.01) -> list[float]:
    half = n // 2
    return [round(median * (1 + spread * (k - half) / half), 4) for k in range(n)]


def ok_outputs(case) -> list[dict]:
    total = case.vars["m"] * case.vars["n"]
    return [{"name": "c", "ok": True, "total": total, "mismatches": 0, "unwritten": 0, "nonfinite_mismatches": 0,
             "max_abs": 1.9e-5, "max_rel": 3.1e-6, "first": [], "shape_error": None}]


def evaluate(cand: Candidate, times: dict[str, float] | None, *, roles=("correctness", "performance"),
             fail: dict | None = None, kind="candidate", compile_info=None, resources=None) -> Evaluation:
    ev = Evaluation(label=cand.name, passed=False, defines=cand.compile_defines(), sha256=cand.sha256, kind=kind,
                    seconds=1.3, compile=compile_info)
    for case in TASK.cases:
        if case.role not in roles:
            continue
        res = CaseResult(case.name, case.role, True, seeds=[0, 1_234_567] if case.role != "holdout" else [88_001])
        if cand.launch or TASK.launch:
            g, b, s = (cand.launch or TASK.launch).resolve({**case.vars, **cand.defines})
            res.launch = {"grid": list(g), "block": list(b), "shared_mem": s}
        if fail and fail["case"] == case.name:
            res.passed, res.reason, res.seeds = False, fail["reason"], [0]
            res.outputs = [fail["output"]]
            res.message = fail["message"]
            ev.cases.append(res)
            continue
        res.outputs = ok_outputs(case)
        if case.role == "performance" and times:
            res.timing = summarize(samples(times[case.name]), flushed=True)
            flops, nbytes = TASK.cost(case)
            secs = res.timing.median * 1e-6
            res.flops, res.bytes = flops, nbytes
            res.gbps, res.tflops = nbytes / secs / 1e9, flops / secs / 1e12
            res.pct_peak_bw = 100 * nbytes / secs / CAL["bandwidth"]
            res.pct_peak_flops = 100 * flops / secs / CAL["fp32_peak"]
            if resources is not None and res.launch:
                r = resources_for_case(compile_info, res.launch, DEVICE)
                r.pop("source"), r.pop("limits")
                res.resources = r
        ev.cases.append(res)
    bad = ev.failures()
    if bad:
        ev.reason, ev.message = bad[0].reason, f"case {bad[0].name}: {bad[0].message}"
        return ev
    ev.passed, ev.reason = True, "passed"
    ev.score_us = geomean([c.timing.median for c in ev.cases if c.timing])
    return ev


def fixed(template: Path, defines: dict) -> str:
    cand = load_candidate(template).with_defines(defines)
    return replace(cand, tunables={}, constraints=()).render()


def attempt(aid, iteration, proposer, cand: Candidate, ev: Evaluation | None, *, parent=None, rationale="",
            best=False, label="", holdout=None, status=None, reason=None, message=None, calls=()) -> dict:
    (OUT / "attempts").mkdir(parents=True, exist_ok=True)
    text = cand.render()
    (OUT / "attempts" / f"{aid}.cu").write_text(text)
    st = status or ("passed" if ev and ev.passed else "failed")
    # the loop's own record type, so that every field today's history.schema.json asks for is there
    return Attempt(id=aid, iteration=iteration, proposer=proposer, label=label or aid, parent=parent,
                   rationale=rationale, source_file=f"attempts/{aid}.cu", sha256=cand.sha256,
                   defines=dict(cand.defines), launch=cand.launch.to_json() if cand.launch else None,
                   tunables={k: list(v) for k, v in cand.tunables.items()}, status=st,
                   reason=reason or (ev.reason if ev else ""),
                   message=message if message is not None else (ev.message if ev else ""),
                   score_us=ev.score_us if ev else None, evaluation=ev.to_json() if ev else None, holdout=holdout,
                   best=best, model_calls=list(calls), created=1764547200.0 + 60 * int(aid[1:])).to_json()


def compiled(cand: Candidate) -> dict:
    return compile_source(cand.render(), arch="sm_90", defines=cand.compile_defines(), file_label=cand.name,
                          use_cache=False).to_json()


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "profiles").mkdir(parents=True)
    attempts = []
    naive_src = TASK.initial.read_text()
    naive = parse_candidate(naive_src, name="a0000.cu")
    ev0 = evaluate(naive, {"sq256": 15.26, "rect": 18.16, "large": 19450.0},
                   roles=("correctness", "performance", "holdout"), compile_info=compiled(naive))
    attempts.append(attempt("a0000", 0, "initial", naive, ev0, rationale="the task's initial kernel", best=True,
                            label="matmul_f32.cu"))
    # a0001: does not compile (a typo), a real NVRTC log
    typo = parse_candidate(naive_src.replace("acc += arow[p]", "acc += arw[p]"), name="a0001.cu")
    try:
        compile_source(typo.render(), arch="sm_90", file_label="a0001.cu", use_cache=False)
        raise SystemExit("a0001 was meant not to compile")
    except CompileError as exc:
        ev1 = Evaluation(label="a0001.cu", passed=False, reason="compile_error", message=str(exc),
                         compile={"log": exc.log, "lines": list(exc.lines)}, defines={}, sha256=typo.sha256, seconds=0.04)
    attempts.append(attempt("a0001", 1, "anthropic:claude-sonnet-4-5", typo, ev1, parent="a0000",
                            rationale="hoist the row pointer", calls=["model-001.json"]))
    # a0002: the last k term is dropped: wrong on every case
    short = parse_candidate(naive_src.replace("for (int p = 0; p < k; ++p)", "for (int p = 0; p + 1 < k; ++p)"),
                            name="a0002.cu")
    fail = {"case": "odd", "reason": "mismatch",
            "output": {"name": "c", "ok": False, "total": 1147, "mismatches": 1147, "unwritten": 0,
                       "nonfinite_mismatches": 0, "max_abs": 9.81, "max_rel": 1.0e3,
                       "first": [{"index": [0, 0], "actual": 1.0371, "expected": -0.4185},
                                 {"index": [0, 1], "actual": 2.2063, "expected": 2.7352},
                                 {"index": [0, 2], "actual": -3.1195, "expected": -3.5054}], "shape_error": None},
            "message": "draw 1 (seed 0), first launch: c: 1147 of 1147 elements differ; max abs 9.81, max rel 1e+03; "
                       "first at (0, 0): got 1.0371, expected -0.4185"}
    ev2 = evaluate(short, None, fail=fail, compile_info=compiled(short))
    attempts.append(attempt("a0002", 1, "anthropic:claude-sonnet-4-5", short, ev2, parent="a0000",
                            rationale="unroll the k loop", calls=["model-001.json"]))
    # a0003..a0005: one tuned proposal (the tiled template), three settings
    tiled = load_candidate(ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_tiled.cu")
    tiled = replace(tiled, name="tiled.cu")
    times = {(16, 1): {"sq256": 9.8, "rect": 11.0, "large": 9800.0},
             (32, 4): {"sq256": 6.0, "rect": 7.0, "large": 5270.0},
             (32, 2): {"sq256": 6.4, "rect": 7.5, "large": 5600.0}}
    for i, (tile, rpt) in enumerate(times):
        aid = f"a{3 + i:04d}"
        c = replace(tiled.with_defines({"TILE": tile, "RPT": rpt}), name=f"{aid}.cu")
        info = compiled(c)
        ev = evaluate(c, times[(tile, rpt)], compile_info=info, resources=(tile, rpt) == (32, 4) or None)
        best = (tile, rpt) == (32, 4)
        attempts.append(attempt(aid, 2, "anthropic:claude-sonnet-4-5", c, ev, parent="a0000", best=best,
                                label="a0003", rationale="shared-memory tiles; each thread computes RPT rows",
                                calls=["model-002.json"],
                                holdout={"passed": True, "reason": "passed", "message": "", "final": False} if best else None))
        if best:
            attempts[-1]["profile"] = "profiles/a0004.json"
    # a0006: register-blocked kernel, better on the large case only
    reg = parse_candidate(fixed(ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_regblock.cu",
                                {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "MINB": 1}), name="a0006.cu")
    ev6 = evaluate(reg, {"sq256": 8.0, "rect": 8.5, "large": 4100.0}, compile_info=compiled(reg))
    attempts.append(attempt("a0006", 3, "anthropic:claude-sonnet-4-5", reg, ev6, parent="a0004",
                            rationale="64x64 block tiles, 4x4 register tiles", calls=["model-003.json"]))
    # a0007: passes the shown cases, fails a hidden one (its details must never reach a prompt)
    ragged = parse_candidate(fixed(ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_tiled.cu", {"TILE": 32, "RPT": 8})
                             .replace("// matmul_f32: classic", "// assumes m % 8 == 0; matmul_f32: classic"), name="a0007.cu")
    ev7 = evaluate(ragged, {"sq256": 5.9, "rect": 6.9, "large": 5900.0}, compile_info=compiled(ragged))
    attempts.append(attempt("a0007", 3, "anthropic:claude-sonnet-4-5", ragged, ev7, parent="a0004",
                            status="failed", reason="holdout_failed",
                            message="failed a hidden case (details withheld from proposers)",
                            holdout={"passed": False, "reason": "mismatch", "final": False,
                                     "message": "case holdout: draw 1 (seed 88001), first launch (m=263, n=131, k=67): "
                                                "c: 131 of 34453 elements differ"}, calls=["model-003.json"]))
    cublas = Candidate(source="// baseline", name="baseline:cublas")
    evb = evaluate(cublas, {"sq256": 11.0, "rect": 10.5, "large": 2900.0}, roles=("performance",), kind="baseline")
    evb.compile, evb.defines, evb.sha256 = None, {}, ""
    for c in evb.cases:
        c.launch = None
    history = {"task": TASK.name, "kernel_forge": "0.1.0",
               "state": {"iteration": 3, "since_improvement": 1, "settled": True, "tokens": {"input": 41000, "output": 9000},
                         "cost_usd": 0.258, "per_model": {"anthropic:claude-sonnet-4-5": {
                             "calls": 3, "input_tokens": 41000, "output_tokens": 9000, "cost_usd": 0.258}},
                         "profile_seconds": {"a0004": 6.4}, "elapsed_s": 212.0},
               "baselines": {"cublas": evb.to_json(with_samples=False)}, "attempts": attempts}
    (OUT / "history.json").write_text(json.dumps(history, indent=1) + "\n")
    env = {"kernel_forge": "0.1.0", "python": "3.12.3", "platform": "Linux-x86_64", "packages": {"cuda-bindings": "13.3.1"},
           "nvrtc": "13.0", "device": DEVICE, "calibration": CAL}
    (OUT / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    # the best's profile: the probe's real ncu row, relabelled per case
    row = parse_csv((ROOT / "tests" / "data" / "ncu-min-h200.csv").read_text())[0]
    cases = {}
    for name, (dram, sm, occ) in {"sq256": (3.1, 38.0, 22.5), "rect": (3.4, 41.2, 24.0), "large": (4.2, 71.5, 46.3)}.items():
        s = summarise_row(row)
        s.update(kernel="matmul_f32", dram_pct=dram, sm_pct=sm, achieved_occupancy_pct=occ,
                 time_us=times[(32, 4)][name], launches_profiled=2)
        cases[name] = s
    prof = {"available": True, "reason": "", "tool": "ncu", "seconds": 6.4, "cases": cases, "notes": [],
            "attempt": "a0004"}
    (OUT / "profiles" / "a0004.json").write_text(json.dumps(prof, indent=1) + "\n")
    run_meta = {"task": TASK.name, "manifest": "manifests/matmul_f32.json", "kernel_forge": "0.1.0",
                "created": "2025-12-01T00:00:00Z", "command": ["kforge", "optimize", "manifests/matmul_f32.json",
                                                              "--model", "anthropic:claude-sonnet-4-5"],
                "hashes": {"task": TASK.hash(), "manifest": _sha(TASK.path), "reference": _sha(TASK.reference.path),
                           "initial": _sha(TASK.initial), "harness": harness_hash()},
                "loop": LOOP.to_json(), "gate": asdict(GateOptions()),
                "proposer": asdict(ProposerConfig(models=["anthropic:claude-sonnet-4-5"]))}
    (OUT / "run.json").write_text(json.dumps(run_meta, indent=1) + "\n")
    finish()
    print(f"wrote {OUT}")


#: the loop settings the recorded run stands for (archive off: nothing of it goes into a user's archive)
LOOP = LoopConfig(max_iterations=3, archive="off")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _NoProposer:
    name, needs_prompt = "anthropic:claude-sonnet-4-5", True

    def propose(self, request):  # pragma: no cover - a finished run asks nothing
        raise AssertionError("the recorded run asks no model")


def finish() -> None:
    """Finish the run as the loop does: the final holdout check and profile (both recorded),
    best.cu, the replay requests, summary.json and report.md."""
    import os

    os.chdir(ROOT)              # paths in the evidence relative to the repository, as a user's run has them
    run = RunDir(OUT.relative_to(ROOT))
    task = load_task("manifests/matmul_f32.json")
    opt = Optimizer(task, RecordedGate.from_run(OUT), _NoProposer(), run, LOOP)
    opt._start()
    opt.state.stop_reason = "max_iterations"
    opt._finish()


if __name__ == "__main__":
    main()
