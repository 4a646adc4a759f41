"""``report.md`` and its plots for a run folder (plots need matplotlib: the ``plot`` extra)."""
from __future__ import annotations

import io


def _plots(run_dir, summary: dict, attempts: list[dict]) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    # 1. score of every passed attempt, in order, with the best so far
    xs, ys, best_x, best_y = [], [], [], []
    current = None
    for i, a in enumerate(attempts):
        if a.get("status") == "passed" and a.get("score_us"):
            xs.append(i)
            ys.append(a["score_us"])
        if a.get("best"):
            current = a["score_us"]
        if current is not None:
            best_x.append(i)
            best_y.append(current)
    if xs:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.scatter(xs, ys, s=14, label="passed attempt")
        ax.step(best_x, best_y, where="post", color="C1", label="best")
        for name, b in summary.get("baselines", {}).items():
            if b.get("score_us"):
                ax.axhline(b["score_us"], ls="--", color="gray", lw=1)
                ax.text(0, b["score_us"], f" {name}", va="bottom", fontsize=8, color="gray")
        ax.set_yscale("log")
        ax.set_xlabel("attempt")
        ax.set_ylabel("score: geomean of medians (µs, log)")
        ax.set_title(f"{summary['task']}: progress")
        ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        run_dir.write_bytes("progress.png", buf.getvalue())
        made.append("progress.png")
    # 2. per-case latency: initial vs best vs baselines, side by side
    best = summary.get("best") or {}
    rows = best.get("per_case") or []
    if rows:
        names = [r["case"] for r in rows]
        series = {"best": [r["median_us"] for r in rows]}
        if all(r.get("speedup_vs_initial") for r in rows):
            series["initial"] = [r["median_us"] * r["speedup_vs_initial"] for r in rows]
        for b in summary.get("baselines", {}):
            if all(b in r["speedup_vs_baselines"] for r in rows):
                series[b] = [r["median_us"] * r["speedup_vs_baselines"][b] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / len(series)
        for k, (label, vals) in enumerate(series.items()):
            ax.bar([i + k * width for i in range(len(names))], vals, width, label=label)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names)
        ax.set_yscale("log")
        ax.set_ylabel("median latency (µs, log)")
        ax.set_title(f"{summary['task']}: per case")
        ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        run_dir.write_bytes("cases.png", buf.getvalue())
        made.append("cases.png")
    return made


def write_report(run_dir, summary: dict, attempts: list[dict]) -> None:
    plots = _plots(run_dir, summary, attempts)
    best = summary.get("best") or {}
    lines = [f"# kforge run {summary['run']}: {summary['task']}", "",
             f"- stop reason: **{summary['stop_reason']}** after {summary['iterations']} iteration(s)",
             f"- attempts gated: {summary['gated']} ({summary['passed']} passed); rejected by reason: "
             + (", ".join(f"{k} {v}" for k, v in sorted(summary["rejected"].items())) or "none"),
             f"- wall time {summary['wall_seconds']:.1f} s ({summary['candidates_per_minute']} candidates/min)",
             f"- tokens in/out {summary['tokens']['input']}/{summary['tokens']['output']}, cost ${summary['cost_usd']:.4f}",
             ""]
    if best:
        lines += [f"## Best: {best['id']} ({best['proposer']} {best['label']})", "",
                  f"score {best['score_us']:.2f} µs, x{best['speedup_vs_initial']:.2f} vs the initial kernel"
                  + "".join(f", x{v:.2f} vs {k}" for k, v in best["speedup_vs_baselines"].items() if v),
                  "; hidden (holdout) cases with fresh inputs: "
                  + ("passed" if (best.get("holdout") or {}).get("passed") else
                     "not run (the initial kernel is still the best)" if best.get("holdout") is None else
                     f"FAILED ({best['holdout'].get('reason')})"), "",
                  "| case | median µs | p10-p90 µs | GB/s | TFLOP/s | % bw | % fp32 | x initial |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
        for r in best["per_case"]:
            lines.append(f"| {r['case']} | {r['median_us']:.2f} | {r['p10_us']:.2f}-{r['p90_us']:.2f} | "
                         f"{f(r.get('gbps'), '.1f')} | {f(r.get('tflops'), '.3f')} | {f(r.get('pct_peak_bw'), '.1f')} | "
                         f"{f(r.get('pct_peak_flops'), '.1f')} | {f(r.get('speedup_vs_initial'), '.2f')} |")
        lines.append("")
    for p in plots:
        lines += [f"![{p}]({p})", ""]
    lines += ["## Attempts", "", "| id | it | proposer | label | defines | verdict | score µs |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for a in attempts:
        d = " ".join(f"{k}={v}" for k, v in sorted(a.get("defines", {}).items()))
        verdict = "pass" if a["status"] == "passed" else a.get("reason") or a["status"]
        if a.get("best"):
            verdict += " (best)"
        lines.append(f"| {a['id']} | {a['iteration']} | {a['proposer']} | {a.get('label', '')} | {d} | {verdict} | "
                     f"{'-' if not a.get('score_us') else format(a['score_us'], '.2f')} |")
    lines += ["", "Replay the best kernel on one case: `kforge replay <run>/best-case-NAME.json`; "
              "re-run the whole evaluation: `kforge eval MANIFEST <run>/best.cu`.", ""]
    run_dir.write_text("report.md", "\n".join(lines))
