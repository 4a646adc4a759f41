"""Benchmarks of the harness itself, measured side by side in one run on the GPU at hand.

  python bench/run_bench.py --out bench-out        (or: make bench)

Writes bench.json, bench.md and bench.png to --out:
- NVRTC compile time of every bundled kernel, cold (no cache) and cached;
- `kforge eval` wall time for matmul_f32, strict gate vs quick (one draw, no repeat checks);
- vector_add achieved bandwidth as % of the measured copy bandwidth;
- naive matmul_f32 vs cuBLAS on each performance case (ratio of medians, same run);
- time to recover from a hung kernel and from an illegal address (until a correct kernel's
  verdict is back), and the verdicts;
- the output check on the CPU (no GPU needed: `--only verify`): one 2^26-element float32 output
  checked in one piece vs in parallel pieces (verify.compare, the CPU fallback), and what the gate
  does on the CPU for one timed draw now (its checks over the worker's GPU summaries and the
  re-check of 64 sampled elements) vs four full CPU checks;
- the reference in its child process (no GPU needed: `--only reference`): starting the child,
  and per case the reference's outputs computed in this process vs in the warm child (the draw,
  the call and the outputs coming back through the pipe), side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (an empty infinite loop or a store through a literal null pointer is undefined behaviour that
# the compiler deletes: spin on a device flag nothing sets, and store far outside the buffer)
HANG = r'''
__device__ volatile int never_set = 0;
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  while (never_set == 0) { }
  c[0] = a[0] + b[0];
}
'''
ILLEGAL = r'''
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[(long long)i + (1LL << 40)] = a[i] + b[i];
}
'''


def compile_times() -> list[dict]:
    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.model.task import load_task

    rows = []
    for m in sorted((ROOT / "manifests").glob("*.json")):
        task = load_task(m)
        files = [task.initial] + list(getattr(task, "templates", ()) or ())
        for f in files:
            cand = load_candidate(f)
            cold = [compile_source(cand.source, arch="sm_90", defines=cand.compile_defines(), use_cache=False).seconds
                    for _ in range(3)]
            compile_source(cand.source, arch="sm_90", defines=cand.compile_defines())
            t0 = time.perf_counter()
            hit = compile_source(cand.source, arch="sm_90", defines=cand.compile_defines())
            cached = time.perf_counter() - t0
            rows.append({"task": task.name, "kernel": f.name, "cold_ms": 1000 * sorted(cold)[1],
                         "cached_ms": 1000 * cached, "cache_hit": hit.cached})
    return rows


def eval_walls() -> dict:
    from kernel_forge.ci.evaluate import run_eval
    from kernel_forge.config.gate_settings import GateOptions

    out = {}
    for label, opts in (("strict", GateOptions()), ("quick", GateOptions.quick())):
        t0 = time.perf_counter()
        result, _ = run_eval(ROOT / "manifests" / "matmul_f32.json", None, opts, with_initial=True,
                             with_baselines=True, with_holdout=True)
        out[label] = {"wall_s": time.perf_counter() - t0, "passed": result["passed"],
                      "cases": {c["name"]: c.get("speedup_vs_baselines", {}).get("cublas") for c in result["cases"]
                                if c["role"] == "performance"},
                      "medians_us": {c["name"]: (c["timing"] or {}).get("median") for c in result["cases"]
                                     if c["role"] == "performance"},
                      "baseline_us": {c["name"]: result["baselines"]["cublas"]["cases"][i]["timing"]["median"]
                                      for i, c in enumerate([x for x in result["cases"] if x["role"] == "performance"])}}
    return out


def bandwidth() -> dict:
    from kernel_forge.ci.evaluate import run_eval
    from kernel_forge.config.gate_settings import GateOptions

    result, _ = run_eval(ROOT / "manifests" / "vector_add.json", None, GateOptions.quick(), with_initial=True,
                         with_baselines=True, with_holdout=False)
    cal = result["calibration"]
    return {"copy_bandwidth_GBps": cal["bandwidth"] / 1e9,
            "theoretical_GBps": result["device"]["theoretical_bandwidth"] / 1e9,
            "cases": {c["name"]: {"GBps": c["gbps"], "pct_of_copy": c["pct_peak_bw"],
                                  "x_cupy": c["speedup_vs_baselines"].get("cupy_add")}
                      for c in result["cases"] if c["role"] == "performance"}}


def recovery() -> dict:
    from kernel_forge.model.candidate import load_candidate, parse_candidate
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.gate.gate import Gate
    from kernel_forge.model.task import load_task

    task = load_task(ROOT / "manifests" / "vector_add.json")
    good = load_candidate(task.initial)
    out = {}
    with Gate(task, GateOptions.quick(warmup=1, reps=5, launch_timeout_s=2.0)) as gate:
        gate.evaluate(good, roles=("correctness",))        # warm worker
        for name, src in (("hang", HANG), ("illegal_address", ILLEGAL)):
            t0 = time.perf_counter()
            bad = gate.evaluate(parse_candidate(src, name=f"{name}.cu"), roles=("correctness",))
            t1 = time.perf_counter()
            after = gate.evaluate(good, roles=("correctness",))
            t2 = time.perf_counter()
            out[name] = {"verdict": bad.reason, "code": bad.cases[0].code if bad.cases else "",
                         "detect_s": t1 - t0, "next_good_verdict_s": t2 - t1, "total_s": t2 - t0,
                         "good_after": after.passed}
        out["worker_restarts"] = gate.restarts
    return out


def _median_wall_s(fn, rounds: int) -> float:
    """The median wall time of ``rounds`` calls of ``fn`` (seconds)."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def verify_speed(n: int = 1 << 26, rounds: int = 3) -> dict:
    """CPU time of the gate's output checks on one large output (medians of ``rounds``)."""
    import numpy as np

    from kernel_forge.model.task import load_task
    from kernel_forge.model.tolerance import compare

    task = load_task(ROOT / "manifests" / "vector_add.json")
    arg = task.outputs[0]
    expected = np.random.default_rng(0).standard_normal(n)
    actual = expected.astype(np.float32)
    tol = task.tolerance_for(arg)

    one = _median_wall_s(lambda: compare(arg.name, actual, expected, arg.param.dtype, tol, chunk=1 << 62), rounds)
    pieces = _median_wall_s(lambda: compare(arg.name, actual, expected, arg.param.dtype, tol), rounds)
    # what the gate itself does on the CPU for one timed draw now: the checks over the worker's
    # observation (its summaries of the GPU comparison) and the re-check of 64 sampled elements
    from kernel_forge.gate.checks import RunContext, judge
    from kernel_forge.model.worker_protocol import AFTER_TIMING, FIRST, REPEAT, Observation, SampleValues, StageObservation, mid_timing

    summary = compare(arg.name, actual[:1024], expected[:1024], arg.param.dtype, tol)
    summary.total = n
    obs = Observation(case="n64M", seed=0, stages=[
        StageObservation(FIRST, {arg.name: 1}, outputs=[summary], kept=True),
        StageObservation(REPEAT, {arg.name: 1}, same_as=FIRST),
        StageObservation(AFTER_TIMING, {arg.name: 1}, same_as=FIRST),
        StageObservation(mid_timing(7), {arg.name: 1}, same_as=FIRST, later_fingerprints={arg.name: 1})])
    idx = np.random.default_rng(1).integers(0, n, 64)
    ctx = RunContext(task, draw=0, seed=0, expected={arg.name: expected}, shapes={arg.name: (n,)},
                     sample_indices={FIRST: {arg.name: idx}}, sample=SampleValues({FIRST: {arg.name: actual[idx]}}))
    assert judge(obs, ctx) is None
    draw = _median_wall_s(lambda: judge(obs, ctx), rounds)
    return {"elements": n, "threads": os.cpu_count(), "one_piece_s": one, "pieces_s": pieces,
            "x_pieces": one / pieces, "timed_draw_s": draw, "four_full_checks_s": 4 * one,
            "x_timed_draw": 4 * one / draw}


def reference_cost(rounds: int = 3) -> dict:
    """What running Python references in a child process costs (CPU only): the child's start, and
    per case in-process vs in the child (medians of ``rounds``, the same draw)."""
    from kernel_forge.model import reference_process
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.references import compute_reference
    from kernel_forge.model.reference_process import reference_outputs
    from kernel_forge.model.task import load_task

    vec = load_task(ROOT / "manifests" / "vector_add.json")
    reference_process.shutdown()
    tiny = vec.case("tiny")
    t0 = time.perf_counter()
    reference_outputs(vec, tiny, 0)
    first = time.perf_counter() - t0
    warm = _median_wall_s(lambda: reference_outputs(vec, tiny, 0), rounds)
    rows = []
    for manifest, names in (("vector_add", ("tiny", "odd", "n16M")), ("matmul_f32", ("odd", "sq256", "rect"))):
        task = vec if manifest == "vector_add" else load_task(ROOT / "manifests" / f"{manifest}.json")
        for name in names:
            case = task.case(name)
            here = _median_wall_s(lambda: compute_reference(task, generate(task, case, 0)), rounds)
            child = _median_wall_s(lambda: reference_outputs(task, case, 0), rounds)
            out_bytes = sum(v.nbytes for v in reference_outputs(task, case, 0).values())
            rows.append({"task": manifest, "case": name, "in_process_ms": here * 1e3, "child_ms": child * 1e3,
                         "overhead_ms": (child - here) * 1e3, "output_bytes": out_bytes})
    return {"start_s": first - warm, "tiny_call_ms": warm * 1e3, "cases": rows}


def plot(results: dict, out: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    rows = results["compile"]
    ax = axes[0]
    labels = [r["kernel"].replace(".cu", "") for r in rows]
    ax.barh(labels, [r["cold_ms"] for r in rows], label="cold")
    ax.barh(labels, [r["cached_ms"] for r in rows], label="cached")
    ax.set_xscale("log")
    ax.set_xlabel("NVRTC compile (ms, log)")
    ax.legend()
    ax = axes[1]
    ev = results["eval"]["strict"]
    names = list(ev["medians_us"])
    ax.bar([i - 0.2 for i in range(len(names))], [ev["medians_us"][n] for n in names], 0.4, label="naive matmul_f32")
    ax.bar([i + 0.2 for i in range(len(names))], [ev["baseline_us"][n] for n in names], 0.4, label="cuBLAS (CuPy)")
    ax.set_xticks(range(len(names)), names)
    ax.set_yscale("log")
    ax.set_ylabel("median latency (µs, log)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "bench.png", dpi=110)


SECTIONS = {"compile": compile_times, "eval": eval_walls, "bandwidth": bandwidth, "recovery": recovery,
            "verify": verify_speed, "reference": reference_cost}


def summary_lines(results: dict) -> list[str]:
    lines = []
    if "compile" in results:
        lines += ["| kernel | cold ms | cached ms |", "| --- | --- | --- |"]
        lines += [f"| {r['task']}/{r['kernel']} | {r['cold_ms']:.1f} | {r['cached_ms']:.2f} |" for r in results["compile"]]
    if "eval" in results:
        e = results["eval"]
        lines += ["", f"kforge eval matmul_f32 wall: strict {e['strict']['wall_s']:.1f} s, quick {e['quick']['wall_s']:.1f} s",
                  "", "| case | naive µs | cuBLAS µs | naive/cuBLAS |", "| --- | --- | --- | --- |"]
        for n, v in e["strict"]["medians_us"].items():
            b = e["strict"]["baseline_us"][n]
            lines.append(f"| {n} | {v:.2f} | {b:.2f} | {v / b:.2f} |")
    if "bandwidth" in results:
        bw = results["bandwidth"]
        lines += ["", f"copy bandwidth {bw['copy_bandwidth_GBps']:.0f} GB/s (theoretical {bw['theoretical_GBps']:.0f})"]
        for n, v in bw["cases"].items():
            lines.append(f"- vector_add {n}: {v['GBps']:.0f} GB/s = {v['pct_of_copy']:.1f}% of copy; x{v['x_cupy']:.2f} vs CuPy")
    if "recovery" in results:
        r = results["recovery"]
        for k in ("hang", "illegal_address"):
            lines.append(f"- {k}: verdict {r[k]['verdict']} {r[k]['code']}, detected in {r[k]['detect_s']:.2f} s, "
                         f"next correct verdict {r[k]['next_good_verdict_s']:.2f} s later (good: {r[k]['good_after']})")
    if "verify" in results:
        v = results["verify"]
        lines += ["", f"output check of {v['elements']} float32 elements ({v['threads']} CPUs): one piece "
                  f"{v['one_piece_s']:.2f} s, parallel pieces {v['pieces_s']:.2f} s (x{v['x_pieces']:.1f}); "
                  f"the gate's checks of one timed draw {v['timed_draw_s'] * 1e3:.2f} ms vs four full CPU checks "
                  f"{v['four_full_checks_s']:.2f} s (x{v['x_timed_draw']:.1f})"]
    if "reference" in results:
        r = results["reference"]
        lines += ["", f"reference child process: start {r['start_s']:.2f} s once; a tiny call {r['tiny_call_ms']:.2f} ms",
                  "", "| task/case | in this process ms | in the child ms | overhead ms | output MB |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {c['task']}/{c['case']} | {c['in_process_ms']:.1f} | {c['child_ms']:.1f} | {c['overhead_ms']:+.1f} | "
                  f"{c['output_bytes'] / 2**20:.1f} |" for c in r["cases"]]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--only", action="append", choices=sorted(SECTIONS),
                    help="run only this section (repeatable); default: all")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KFORGE_CACHE_DIR", tempfile.mkdtemp(prefix="kforge-bench-cache-"))
    results = {}
    for name in args.only or list(SECTIONS):
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        results[name] = SECTIONS[name]()
        print(f"[bench] {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    (out / "bench.json").write_text(json.dumps(results, indent=2))
    lines = summary_lines(results)
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    if "compile" in results and "eval" in results:
        plot(results, out)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
