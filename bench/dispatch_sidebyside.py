"""Settings per shape on the GPU: the matmul regblock template's best setting by geomean on the
H200 (the small tiles), its best setting on 4096^3 (the large tiles), and the dispatch rule that
runs each case with its own, gated in full (holdout included) and then re-timed side by side in
one gate (interleaved rounds, samples pooled), with cuBLAS timed by the same gate.

    python bench/dispatch_sidebyside.py --out DIR [--rounds 3]

Writes DIR/dispatch.json, DIR/dispatch.md (per case: median µs and x cuBLAS of each kernel, and
which rule line each case ran) and DIR/dispatch.png.  About 30 s on an H200.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernel_forge.model.candidate import load_candidate  # noqa: E402
from kernel_forge.model.dispatch import Branch, Rule  # noqa: E402
from kernel_forge.config.gate import GateOptions  # noqa: E402
from kernel_forge.gate.gate import Gate  # noqa: E402
from kernel_forge.model.task import load_task  # noqa: E402

SMALL = {"BM": 32, "BN": 32, "BK": 32, "TM": 4, "TN": 4, "MINB": 1}     # a0007 of the s5 run: best on sq256, rect
LARGE = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "MINB": 1}   # a0015: best on 4096^3 (3,098 µs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    template = load_candidate(ROOT / "manifests" / "templates" / "matmul_f32_regblock.cu")
    kernels = {
        "small tiles": replace(template, name="small.cu", defines=dict(SMALL)),
        "large tiles": replace(template, name="large.cu", defines=dict(LARGE)),
        "rule": replace(template, name="rule.cu", defines=dict(SMALL),
                        dispatch=Rule((Branch("m*n*k >= 1073741824", LARGE), Branch(None, SMALL)))),
    }
    t0 = time.perf_counter()
    with Gate(task, GateOptions()) as gate:
        gate.progress = print
        gate.precompile(list(kernels.values()))
        full = gate.evaluate(kernels["rule"], roles=("correctness", "performance", "holdout"))
        print(f"rule, full gate with holdout: {full.reason} {full.message}")
        evs = gate.retime(list(kernels.values()), rounds=args.rounds)
        cublas = gate.evaluate_baseline("cublas")
        device = gate.device_info()
    seconds = time.perf_counter() - t0
    perf = [c.name for c in task.cases if c.role == "performance"]
    result = {"device": device.get("name"), "seconds": round(seconds, 1), "rounds": args.rounds,
              "rule": kernels["rule"].dispatch.to_json(),
              "full_gate": {"passed": full.passed, "reason": full.reason, "message": full.message,
                            "variants": {c.name: c.variant["branch"] for c in full.cases if c.variant}},
              "cublas_us": {c.name: c.timing.median for c in cublas.cases if c.timing},
              "kernels": {}}
    for (name, cand), ev in zip(kernels.items(), evs):
        result["kernels"][name] = {"passed": ev.passed, "reason": ev.reason, "score_us": ev.score_us,
                                   "median_us": {c.name: c.timing.median for c in ev.cases if c.timing},
                                   "p20_p80_us": {c.name: [c.timing.p20, c.timing.p80] for c in ev.cases if c.timing},
                                   "variant": {c.name: c.variant["branch"] for c in ev.cases if c.variant}}
    (out / "dispatch.json").write_text(json.dumps(result, indent=1))
    lines = [f"# Settings per shape: matmul_f32 regblock on {result['device']}", "",
             f"Rule: {kernels['rule'].dispatch.describe()}", "",
             f"Full gate (strict, holdout included) of the rule: {full.reason}; lines run: {result['full_gate']['variants']}",
             "", f"Side by side, {args.rounds} interleaved rounds; cuBLAS timed by the same gate.", "",
             "| kernel | " + " | ".join(f"{c} µs (x cuBLAS)" for c in perf) + " | geomean µs |",
             "| --- | " + " | ".join("---" for _ in perf) + " | --- |"]
    for name, k in result["kernels"].items():
        cells = []
        for c in perf:
            t, b = k["median_us"].get(c), result["cublas_us"].get(c)
            cells.append("-" if t is None else f"{t:.2f} ({b / t:.2f})" if b else f"{t:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {k['score_us'] or 0:.2f} |")
    lines.append(f"| cuBLAS | " + " | ".join(f"{result['cublas_us'].get(c, 0):.2f}" for c in perf)
                 + f" | {cublas.score_us or 0:.2f} |")
    lines += ["", f"wall time {seconds:.1f} s"]
    (out / "dispatch.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 3.5))
        width = 0.25
        for i, (name, k) in enumerate(result["kernels"].items()):
            ratios = [result["cublas_us"][c] / k["median_us"][c] if c in k["median_us"] else 0 for c in perf]
            ax.bar([x + i * width for x in range(len(perf))], ratios, width, label=name)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks([x + width for x in range(len(perf))], perf)
        ax.set_ylabel("x cuBLAS (higher is faster)")
        ax.set_title("matmul_f32 regblock: one setting vs settings per shape")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "dispatch.png", dpi=110)
    except ImportError:
        pass
    ok = full.passed and all(k["passed"] for k in result["kernels"].values()) \
        and result["kernels"]["rule"]["variant"].get("large") == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
