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
    from kernel_forge.task import load_task

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
    from kernel_forge.candidate import load_candidate, parse_candidate

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
    from kernel_forge.gate import Gate

    with Gate(task, options) as gate:
        gate.ensure_gpu()
        t0 = time.perf_counter()
        first = gate.evaluate(warm)              # worker, inputs, references, uploads: once per gate
        first_s = time.perf_counter() - t0
        rest = cands
        walls, costs, verdicts = [], [], [first.reason]
        t_all = time.perf_counter()
        if overlap:
            gate.precompile(rest)
        for c in rest:
            t0 = time.perf_counter()
            ev = gate.evaluate(c)
            walls.append(time.perf_counter() - t0)
            costs.append(_flatten(ev.cost))
            verdicts.append(ev.reason)
        total = time.perf_counter() - t_all
        clock = gate.worker().clock
    keys = sorted({k for c in costs for k in c})
    parts = {k: round(statistics.median(c.get(k, 0.0) for c in costs), 5) for k in keys}
    return {"first_s": round(first_s, 4), "median_s": round(statistics.median(walls), 4),
            "per_candidate_s": round(total / max(1, len(rest)), 4), "candidates_per_minute": round(60 * len(rest) / total, 1),
            "parts_median_s": parts, "verdicts": verdicts, "clock": clock}


def table(results: dict) -> str:
    lines = ["| mode | gating | per candidate (ms) | median evaluate (ms) | first (s) | candidates/min |",
             "| --- | --- | --- | --- | --- | --- |"]
    for key, r in results.items():
        mode, how = key.split("/")
        lines.append(f"| {mode} | {how} | {1e3 * r['per_candidate_s']:.1f} | {1e3 * r['median_s']:.1f} | "
                     f"{r['first_s']:.2f} | {r['candidates_per_minute']:.0f} |")
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
    args = ap.parse_args()
    from kernel_forge.gate import GateOptions
    from kernel_forge.task import load_task

    tmp = Path(tempfile.mkdtemp(prefix="kforge-gate-cost-"))
    task = load_task(args.manifest) if args.manifest else benchmark_task(tmp)
    results = {}
    for mode in args.modes.split(","):
        for overlap in (False, True):
            os.environ["KFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kforge-cold-")   # every compile cold
            opts = GateOptions() if mode == "full" else GateOptions.quick()
            warm, cands = candidates(task, args.manifest, f"{mode}-{overlap}-{time.time_ns()}")
            key = f"{mode}/{'precompile+evaluate' if overlap else 'evaluate'}"
            results[key] = run_mode(task, opts, warm, cands, overlap=overlap)
            print(f"[gate_cost] {key}: {json.dumps(results[key])}", flush=True)
    text = table(results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gate-cost.json").write_text(json.dumps({"task": task.name, "results": results}, indent=1))
    (args.out / "gate-cost.md").write_text(f"# Gate cost per candidate: {task.name}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
