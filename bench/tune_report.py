"""Table and plot of built-in tuner runs (one per task), from their run folders.

  python bench/tune_report.py RUNS_ROOT... --out bench/tune   (reads RUNS_ROOT/**/run-NNN/)

A finished run contributes its summary.json (the best after side-by-side re-measurement and the
final holdout check). A run killed before it finished has no summary: its row gives the fastest
candidate that passed the gate as measured in its own evaluation, marked "not settled".
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernel_forge.evidence.history_log import read_history  # noqa: E402


def _time(s: str) -> float:
    return datetime.fromisoformat(s).timestamp()


def row_of(run: Path) -> dict | None:
    meta = json.loads((run / "run.json").read_text())
    task = meta.get("task") or Path(meta["manifest"]).stem
    summary = run / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        b = s["best"]
        return {"task": s["task"], "settled": True, "best": b["label"], "defines": b.get("defines") or {},
                "x_initial": b["speedup_vs_initial"], "x_vendor": b.get("speedup_vs_baselines") or {},
                "pct_peak_bw": [c.get("pct_peak_bw") for c in b["per_case"]],
                "pct_peak_flops": [c.get("pct_peak_flops") for c in b["per_case"]],
                "wall_s": s["wall_seconds"], "gated": s["gated"], "per_min": s["candidates_per_minute"],
                "stop": s["stop_reason"].split(":")[0]}
    hist = read_history(run, check=False)      # a killed run: its attempt log, history.jsonl
    if not hist:
        return None
    done = [a for a in hist["attempts"] if a["status"] != "pending"]
    if not done:
        return None
    initial = hist["attempts"][0]
    passed = [a for a in done[1:] if a["status"] == "passed" and a["score_us"]]
    best = min(passed, key=lambda a: a["score_us"]) if passed else initial
    base = {k: v.get("score_us") for k, v in (hist.get("baselines") or {}).items()}
    wall = hist["state"].get("elapsed_s") or 0.0
    return {"task": task, "settled": False, "best": best["label"], "defines": best.get("defines") or {},
            "x_initial": initial["score_us"] / best["score_us"],
            "x_vendor": {k: v / best["score_us"] for k, v in base.items() if v},
            "pct_peak_bw": [c.get("pct_peak_bw") for c in best["evaluation"]["cases"] if c["role"] == "performance"],
            "pct_peak_flops": [c.get("pct_peak_flops") for c in best["evaluation"]["cases"] if c["role"] == "performance"],
            "wall_s": wall, "gated": len(done), "per_min": 60.0 * len(done) / wall if wall else None,
            "stop": "killed"}


def _pct(values: list) -> str:
    vals = [v for v in values if v is not None]
    return "–" if not vals else " / ".join(f"{v:.0f}" for v in vals)


def table(rows: list[dict]) -> list[str]:
    lines = ["| task | best (settings) | × initial | × vendor | % peak BW | % peak FP32 | wall s | gated | per min | stop |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        d = " ".join(f"{k}={v}" for k, v in sorted(r["defines"].items()))
        vendor = ", ".join(f"{k} {v:.2f}" for k, v in r["x_vendor"].items()) or "–"
        mark = "" if r["settled"] else " (not settled)"
        per_min = f"{r['per_min']:.1f}" if r["per_min"] else "–"
        lines.append(f"| {r['task']} | {r['best']} {d}{mark} | {r['x_initial']:.2f} | {vendor} | "
                     f"{_pct(r['pct_peak_bw'])} | {_pct(r['pct_peak_flops'])} | {r['wall_s']:.0f} | {r['gated']} | "
                     f"{per_min} | {r['stop']} |")
    return lines


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [r["task"] + ("" if r["settled"] else "*") for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar([i - 0.2 for i in x], [r["x_initial"] for r in rows], width=0.4, label="vs the task's initial kernel")
    ax.bar([i + 0.2 for i in x], [min(r["x_vendor"].values()) if r["x_vendor"] else 0 for r in rows], width=0.4,
           label="vs the vendor baseline")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(list(x), names, rotation=20)
    ax.set_ylabel("speedup (×, log)")
    ax.set_title("kforge built-in tuner on the bundled tasks (* = killed before it settled)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("tune"))
    ap.add_argument("--no-vendor", action="append", default=[], metavar="TASK",
                    help="leave out TASK's vendor figures (e.g. measured with a broken baseline)")
    args = ap.parse_args()
    rows = {}
    for root in args.roots:
        for run in sorted(root.glob("**/run-[0-9][0-9][0-9]")):
            r = row_of(run)
            if r and (r["task"] not in rows or r["settled"] >= rows[r["task"]]["settled"]):
                rows[r["task"]] = r      # a later finished run of a task replaces an earlier one
    ordered = [rows[k] for k in sorted(rows)]
    for r in ordered:
        if r["task"] in args.no_vendor:
            r["x_vendor"] = {}
    lines = table(ordered)
    if args.no_vendor:
        lines += ["", f"Vendor figures left out for: {', '.join(sorted(args.no_vendor))}."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    plot(ordered, Path(f"{args.out}.png"))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
