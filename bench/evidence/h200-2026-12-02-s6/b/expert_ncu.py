"""Which pipe metrics ncu has on this GPU, and the diagnosis they give (GPU + ncu).

Profiles two matmul_f32 kernels on sq256 and large with kforge's metric set: the 32 x 32 tiled
template at TILE=32 RPT=4 (the kernel issue 17 filed: "compute-bound" at 17 % of the FMA rate
with mio_throttle 46 %) and the warp-tiled SGEMM pattern.  Each is also gated (one draw) so the
diagnosis has its times; the diagnosis is printed as the prompt shows it.  Writes
``ncu-metrics.json``: the metrics asked for, those this ncu lacks, each case's pipe fields, the
instruction mix, the named limit per case.

    python bench/evidence/h200-2026-12-02-s6/b/expert_ncu.py --out OUT
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]     # the repository (this script sits beside its evidence)
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()

    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.analysis.diagnosis import diagnose
    from kernel_forge.analysis.directions import directions
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate
    from kernel_forge.kernels.library import by_name
    from kernel_forge.gate.profiler import METRICS, PIPE_METRICS, find_ncu, query_metrics
    from kernel_forge.model.task import load_task

    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    kernels = {"tiled32_rpt4": load_candidate(by_name("matmul_f32_tiled").path)
               .with_defines({"TILE": 32, "RPT": 4}),
               "gemm_simt_warptile": load_candidate(by_name("gemm_simt_warptile").path)}
    ncu = find_ncu()
    report: dict = {"ncu": ncu, "asked": list(METRICS + PIPE_METRICS), "kernels": {}}
    report["listed_by_query"] = None
    if ncu:
        listed = query_metrics(ncu)
        report["listed_by_query"] = None if listed is None else sorted(m for m in PIPE_METRICS
                                                                      if m.split(".")[0] in listed)
    with Gate(task, GateOptions.quick()) as gate:
        gate.ensure_gpu()
        device, cal = gate.device_info(), gate.calibrate()
        cublas = gate.evaluate_baseline("cublas").to_json()
        for name, cand in kernels.items():
            t0 = time.perf_counter()
            ev = gate.evaluate(cand, roles=("performance",)).to_json()
            prof = gate.profile(cand, ["sq256", "large"])
            d = diagnose(task, ev, baselines={"cublas": cublas}, device=device, calibration=cal, profile=prof)
            text = d.render()
            print(f"\n=== {name}: {ev.get('reason')} ({time.perf_counter() - t0:.1f} s, profile "
                  f"{prof.get('seconds')} s, available={prof.get('available')} {prof.get('reason') or ''})")
            print(text)
            print("first direction:", (directions(d, 1) or [""])[0][:400])
            report["kernels"][name] = {
                "reason": ev.get("reason"), "profile_available": prof.get("available"),
                "profile_reason": prof.get("reason"), "metrics_missing": prof.get("metrics_missing"),
                "cases": {c: {k: v for k, v in s.items() if k not in ("stalls",)} | {"stalls": s.get("stalls")}
                          for c, s in (prof.get("cases") or {}).items()},
                "instruction_mix": prof.get("instruction_mix"),
                "diagnosis": {c.name: {"bound": c.bound, "bound_why": c.bound_why, "limiter": c.limiter,
                                       "pipe_busy": c.pipe_busy, "median_us": c.median_us} for c in d.cases},
                "render": text}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ncu-metrics.json").write_text(json.dumps(report, indent=1, default=str))
    missing = {m for k in report["kernels"].values() for m in (k.get("metrics_missing") or [])}
    print(f"\npipe metrics asked: {len(PIPE_METRICS)}; missing on this GPU: {sorted(missing) or 'none'}")


if __name__ == "__main__":
    main()
