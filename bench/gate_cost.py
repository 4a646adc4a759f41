"""Where the gate's time per candidate goes (GPU): issue 10's benchmark, split by part.

vector_add with a 2^24-float performance case and a 1,000,003-element correctness case; ten
block sizes, each a cold compile (a fresh compile cache per mode); the full gate and --quick,
each gated two ways: one by one (compile inside evaluate) and as the loop does it
(``gate.precompile(batch)`` then ``evaluate`` one by one, compiles overlapping the gating).  The
first evaluation of each gate (worker start, input draws, references, uploads) is reported apart.
Per candidate it prints the median wall time and the median of each part of ``Evaluation.cost``:
compile (waited for), load, runs (worker answers), the worker's own parts (upload, launches,
fingerprints, timing, compare, ...), reference, sample and checks.

    python bench/gate_cost.py --out OUT                 # the benchmark above
    python bench/gate_cost.py --manifest manifests/matmul_f32.json --out OUT   # initial + templates
    KFORGE_FLUSH=split python bench/gate_cost.py --modes full --tag split --out OUT  # the two-kernel flush

Besides the parts, per mode: the timed launches of a candidate (median) and the worker's host
time per timed launch (its "timing" part over its timed launches: CUPTI's records, the enqueueing,
the waits), and which L2 flush the worker used (gpu/flush.py).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BLOCKS = [64, 96, 128, 160, 192, 256, 320, 384, 512, 1024]

KERNEL = r'''
// kforge: grid = [cdiv(n, BLOCK)]
// kforge: block = [BLOCK]
// kforge: tune BLOCK = [''' + ", ".join(str(b) for b in BLOCKS) + r''']
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
'''


def benchmark_task(tmp: Path):
    from kernel_forge.model.task import load_task

    src = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    src["reference"]["python"] = str(ROOT / "references" / "vector_add.py") + ":reference"
    src["baselines"] = {}
    src.pop("templates", None)
    src["initial"] = str(ROOT / "manifests" / "vector_add.cu")
    src["cases"] = [{"name": "odd", "role": "correctness", "vars": {"n": 1000003}},
                    {"name": "n16M", "role": "performance", "vars": {"n": 1 << 24}}]
    (tmp / "vector_add_bench.json").write_text(json.dumps(src))
    return load_task(tmp / "vector_add_bench.json")


def candidates(task, manifest: str | None, salt: str):
    """A warm-up candidate (the initial kernel) and the measured ones, made unique per run (a
    comment) so every compile is cold."""
    from kernel_forge.model.candidate import load_candidate, parse_candidate

    warm = load_candidate(task.initial)
    if manifest is None:
        base = parse_candidate(KERNEL + f"// {salt}\n", name="vector_add_blocks.cu")
        return warm, [base.with_defines({"BLOCK": b}) for b in BLOCKS]
    out = []
    for tpl in task.templates:
        c = parse_candidate(tpl.read_text(encoding="utf-8") + f"\n// {salt}\n", name=tpl.name)
        out += [c.with_defines(d) for d in c.configurations()[:10]]
    return warm, out


def _flatten(cost: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for k, v in (cost or {}).items():
        if isinstance(v, dict):
            out.update(_flatten(v, prefix + k + "."))
        elif isinstance(v, (int, float)):
            out[prefix + k] = float(v)
    return out


def run_mode(task, options, warm, cands, *, overlap: bool) -> dict:
    from kernel_forge.gate.gate import Gate

    with Gate(task, options) as gate:
        gate.ensure_gpu()
        t0 = time.perf_counter()
        first = gate.evaluate(warm)              # worker, inputs, references, uploads: once per gate
        first_s = time.perf_counter() - t0
        rest = cands
        walls, costs, verdicts, timed = [], [], [first.reason], []
        t_all = time.perf_counter()
        if overlap:
            gate.precompile(rest)
        for c in rest:
            t0 = time.perf_counter()
            ev = gate.evaluate(c)
            walls.append(time.perf_counter() - t0)
            costs.append(_flatten(ev.cost))
            verdicts.append(ev.reason)
            reps = sum(len(x.timing.samples_us) for x in ev.cases if x.timing is not None)
            secs = (ev.cost or {}).get("worker", {}).get("timing", 0.0)
            timed.append({"reps": reps, "timing_ms": round(1e3 * secs, 2),
                          "ms_per_timed_launch": round(1e3 * secs / reps, 4) if reps else None,
                          "median_us": [round(x.timing.median, 2) for x in ev.cases if x.timing is not None]})
        total = time.perf_counter() - t_all
        clock = gate.worker().clock
        flush = (gate.device or {}).get("flush", "")
    keys = sorted({k for c in costs for k in c})
    parts = {k: round(statistics.median(c.get(k, 0.0) for c in costs), 5) for k in keys}
    per_launch = [t["ms_per_timed_launch"] for t in timed if t["ms_per_timed_launch"]]
    return {"first_s": round(first_s, 4), "median_s": round(statistics.median(walls), 4),
            "per_candidate_s": round(total / max(1, len(rest)), 4), "candidates_per_minute": round(60 * len(rest) / total, 1),
            "parts_median_s": parts, "verdicts": verdicts, "clock": clock, "flush": flush,
            "timed_reps_median": statistics.median([t["reps"] for t in timed]) if timed else None,
            "ms_per_timed_launch_median": statistics.median(per_launch) if per_launch else None,
            "per_candidate": [{"wall_ms": round(1e3 * w, 1), **t} for w, t in zip(walls, timed)]}


def table(results: dict) -> str:
    lines = ["| mode | gating | per candidate (ms) | median evaluate (ms) | first (s) | candidates/min | "
             "timed launches | host ms per timed launch | flush |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, r in results.items():
        mode, how = key.split("/")
        per = r.get("ms_per_timed_launch_median")
        lines.append(f"| {mode} | {how} | {1e3 * r['per_candidate_s']:.1f} | {1e3 * r['median_s']:.1f} | "
                     f"{r['first_s']:.2f} | {r['candidates_per_minute']:.0f} | {r.get('timed_reps_median')} | "
                     f"{per if per is None else round(per, 3)} | {r.get('flush', '')} |")
    keys = sorted({k for r in results.values() for k in r["parts_median_s"]})
    lines += ["", "| part (median ms per candidate) | " + " | ".join(results) + " |",
              "| --- |" + " --- |" * len(results)]
    for k in keys:
        scale = 1.0 if k == "runs" else 1e3
        lines.append(f"| {k} | " + " | ".join(f"{scale * r['parts_median_s'].get(k, 0.0):.2f}" for r in results.values()) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--manifest", default=None, help="gate this task's initial kernel and templates instead")
    ap.add_argument("--modes", default="full,quick")
    ap.add_argument("--gating", default="evaluate,precompile", help="one by one (evaluate), compiling ahead (precompile)")
    ap.add_argument("--tag", default="", help="a suffix for the output files (e.g. split for KFORGE_FLUSH=split)")
    args = ap.parse_args()
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.model.task import load_task

    tmp = Path(tempfile.mkdtemp(prefix="kforge-gate-cost-"))
    task = load_task(args.manifest) if args.manifest else benchmark_task(tmp)
    results = {}
    for mode in args.modes.split(","):
        for overlap in [g == "precompile" for g in args.gating.split(",")]:
            os.environ["KFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kforge-cold-")   # every compile cold
            opts = GateOptions() if mode == "full" else GateOptions.quick()
            warm, cands = candidates(task, args.manifest, f"{mode}-{overlap}-{time.time_ns()}")
            key = f"{mode}/{'precompile+evaluate' if overlap else 'evaluate'}"
            results[key] = run_mode(task, opts, warm, cands, overlap=overlap)
            print(f"[gate_cost] {key}: {json.dumps(results[key])}", flush=True)
    text = table(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    tag = f"-{args.tag}" if args.tag else ""
    (args.out / f"gate-cost{tag}.json").write_text(json.dumps({"task": task.name, "results": results,
                                                               "KFORGE_FLUSH": os.environ.get("KFORGE_FLUSH", "")},
                                                              indent=1))
    (args.out / f"gate-cost{tag}.md").write_text(f"# Gate cost per candidate: {task.name}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
