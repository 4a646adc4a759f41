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
    from kernel_forge.reports.heatmap import draw_heatmap
    if draw_heatmap(run_dir, summary, attempts):
        made.append("heatmap.png")
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
        made.append(_save(fig, ax, run_dir, "progress.png"))
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
        made.append(_save(fig, ax, run_dir, "cases.png"))
    return made


def _save(fig, ax, run_dir, name: str) -> str:
    """Lay out ``fig`` with its legend and write it into the run as ``name``; returns ``name``."""
    import matplotlib.pyplot as plt

    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    run_dir.write_bytes(name, buf.getvalue())
    return name


def _slower_text(best: dict) -> str:
    rows = best.get("slower_than") or []
    if not rows:
        return ""
    return "; **slower on** " + ", ".join(f"{r['case']} (x{r['ratio']:.2f} vs {r['than']})" for r in rows)


def _diagnosis_lines(summary: dict) -> list[str]:
    """The diagnosis of the best: the table report.md opens with."""
    d = summary.get("diagnosis")
    if not d:
        return []
    from kernel_forge.analysis.case_diagnosis import CaseDiagnosis
    from kernel_forge.analysis.diagnosis import Diagnosis

    diag = Diagnosis(**{k: v for k, v in d.items() if k != "cases" and k in Diagnosis.__dataclass_fields__})
    diag.cases = [CaseDiagnosis(**{k: v for k, v in c.items() if k in CaseDiagnosis.__dataclass_fields__})
                  for c in d.get("cases", [])]
    lines = ["### Diagnosis", ""]
    if diag.peak and diag.bandwidth:
        lines += [f"Roofline: {diag.peak['label']} {diag.peak['flops'] / 1e12:.1f} {diag.peak['unit']}, "
                  f"{diag.bandwidth_source} {diag.bandwidth / 1e9:.0f} GB/s, ridge {diag.ridge:.1f} FLOP/byte"
                  + (f"; {diag.tensor_note}" if diag.tensor_note else "") + ".", ""]
    lines += [diag.render_markdown(), ""]
    for c in diag.cases:
        if c.bound_why:
            lines.append(f"- {c.name}: {c.bound}-bound ({c.bound_why})"
                         + (f"; resources from {c.resources_source}" if c.resources_source else ""))
    ps = diag.profile_status
    if ps is not None and not ps.get("available"):
        lines.append(f"- no profiler metrics: {ps.get('reason')}")
    lines += [f"- {n}" for n in diag.notes]
    lines.append("")
    return lines


def _profile_lines(run_dir, attempts: list[dict]) -> list[str]:
    """The saved profiles of the bests (profiles/<attempt>.json), summarised."""
    folder = run_dir.path / "profiles"
    if not folder.is_dir():
        return []
    from kernel_forge.analysis.profile_reading import normalise_case, stall_text

    order = {a["id"]: i for i, a in enumerate(attempts)}
    bests = {a["id"] for a in attempts if a.get("best")}
    from kernel_forge.common.errors import InputError
    from kernel_forge.common.reads import loads

    profs = []
    for f in sorted(folder.glob("a*.json")):
        try:
            profs.append((f.stem, loads(f.read_text(), str(f))))
        except (OSError, ValueError, InputError):     # damaged or too deep: reported by the evidence checks
            continue
    if not profs:
        return []
    profs.sort(key=lambda kv: order.get(kv[0], 1 << 30))
    total = sum(p.get("seconds") or 0.0 for _, p in profs)
    lines = ["## Profiles (Nsight Compute)", "",
             f"{len(profs)} profile(s), {total:.1f} s in all ({total / len(profs):.1f} s each, the target's start-up "
             "included).", "",
             "| attempt | case | ncu time µs | DRAM % | L2 % | SM % | achieved occupancy % | top warp stalls |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    f = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    for aid, p in profs:
        tag = aid + (" (best)" if aid in bests else "")
        if not p.get("available"):
            lines.append(f"| {tag} | - | - | - | - | - | - | not available: {p.get('reason', '')} |")
            continue
        for case, c in (p.get("cases") or {}).items():
            c = normalise_case(c) or {}
            stalls = stall_text(c.get("stalls") or [], top=3)
            lines.append(f"| {tag} | {case} | {f(c.get('time_us'))} | {f(c.get('dram_pct'))} | {f(c.get('l2_pct'))} | "
                         f"{f(c.get('sm_pct'))} | {f(c.get('achieved_occupancy_pct'))} | {stalls or '-'} |")
    return lines + [""]


def _variant_text(v: dict | None) -> str:
    if not v:
        return "-"
    return f"{v['branch'] + 1}: {v['when']}"


def _dispatch_lines(best: dict) -> list[str]:
    """The best kernel's dispatch rule (settings per shape), one numbered line per branch, and the
    line each hidden case ran with."""
    rule = best.get("dispatch")
    if not rule:
        return []
    out = ["### Settings per shape (dispatch rule in best.cu)", "",
           "Each case runs with the first line whose condition holds for its variables:", ""]
    for i, b in enumerate(rule):
        setting = ", ".join(f"{k}={v}" for k, v in sorted(b["defines"].items()))
        out.append(f"{i + 1}. `{b['when'] or 'default'}` -> {setting}")
    hidden = ((best.get("holdout") or {}).get("variants") or {})
    if hidden:
        out += ["", "hidden (holdout) cases ran with line " + ", ".join(
            f"{k}: {v + 1}" for k, v in sorted(hidden.items()))]
    return out + [""]


def _origin_lines(run_dir, summary: dict) -> list[str]:
    """Where the task and the baseline came from, when either was written by a model (the
    baseline's source is shown: every speedup of the report is measured against it)."""
    out = []
    gen = summary.get("generated")
    if gen:
        review = (f"accepted by {gen.get('accepted_by')} at {gen.get('accepted_at')} (its checks re-run)"
                  if gen.get("accepted") else
                  f"edited since ({', '.join(gen.get('edited') or [])}), taken as reviewed; its checks were not re-run")
        out.append(f"- **generated task**: written by {gen.get('model')} (kforge init --describe) at {gen.get('created')}"
                   f"; the witnesses' cross-check {gen.get('crosscheck')}; {review}")
    init = summary.get("initial")
    if not init:
        if summary.get("best") is None:
            out.append("- **no baseline**: no attempt passed the gate and the holdout, so nothing was measured "
                       "against anything")
        return out
    if init.get("origin", "task") == "task":
        return out
    out.append(f"- **baseline {init['id']}** ({init['score_us']:.2f} µs): {init.get('note', '')}; every speedup "
               f"(\"x initial\") is measured against it, not against a hand-written kernel")
    try:
        source = (run_dir.path / init["source_file"]).read_text(encoding="utf-8")
    except (OSError, KeyError, UnicodeDecodeError):
        return out
    from kernel_forge.model.clip import clip_source
    out += ["", f"<details><summary>baseline {init['id']} source ({init.get('source_file')}, "
                f"{'model-written' if init.get('origin') == 'translation' else 'a template setting'})</summary>", "",
            "```cuda", clip_source(source.rstrip(), 8000), "```", "", "</details>"]
    return out


def write_report(run_dir, summary: dict, attempts: list[dict]) -> None:
    plots = _plots(run_dir, summary, attempts)
    best = summary.get("best") or {}
    lines = [f"# kforge run {summary['run']}: {summary['task']}", "",
             f"- stop reason: **{summary['stop_reason']}** after {summary['iterations']} iteration(s)",
             f"- attempts gated: {summary['gated']} ({summary['passed']} passed); rejected by reason: "
             + (", ".join(f"{k} {v}" for k, v in sorted(summary["rejected"].items())) or "none"),
             f"- wall time {summary['wall_seconds']:.1f} s ({summary['candidates_per_minute']} candidates/min)",
             f"- tokens in/out {summary['tokens']['input']}/{summary['tokens']['output']}, cost ${summary['cost_usd']:.4f}"]
    lines += _origin_lines(run_dir, summary) + [""]
    if best:
        init = summary.get("initial") or {}
        against = ("the initial kernel" if init.get("origin", "task") == "task" else
                   f"the baseline {init.get('id')} (a {init.get('origin')})")
        lines += [f"## Best: {best['id']} ({best['proposer']} {best['label']})", "",
                  f"score {best['score_us']:.2f} µs, x{best['speedup_vs_initial']:.2f} vs {against}"
                  + "".join(f", x{v:.2f} vs {k}" for k, v in best["speedup_vs_baselines"].items() if v)
                  + _slower_text(best)
                  + "; hidden (holdout) cases with fresh inputs: "
                  + ("passed" if (best.get("holdout") or {}).get("passed") else
                     f"not run ({against} is still the best)" if best.get("holdout") is None else
                     f"FAILED ({best['holdout'].get('reason')})"), ""]
        lines += _diagnosis_lines(summary)
        lines += _dispatch_lines(best)
        rule = bool(best.get("dispatch"))    # under a dispatch rule each case names the line it ran with
        lines += ["### Per case", "",
                  "| case | median µs | p10-p90 µs | GB/s | TFLOP/s | % bw | % fp32 | x initial |"
                  + (" variant |" if rule else ""),
                  "| --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if rule else "")]
        f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
        for r in best["per_case"]:
            lines.append(f"| {r['case']} | {r['median_us']:.2f} | {r['p10_us']:.2f}-{r['p90_us']:.2f} | "
                         f"{f(r.get('gbps'), '.1f')} | {f(r.get('tflops'), '.3f')} | {f(r.get('pct_peak_bw'), '.1f')} | "
                         f"{f(r.get('pct_peak_flops'), '.1f')} | {f(r.get('speedup_vs_initial'), '.2f')} |"
                         + (f" {_variant_text(r.get('variant'))} |" if rule else ""))
        lines.append("")
    lines += _profile_lines(run_dir, attempts)
    from kernel_forge.reports.cost_report import cost_lines
    lines += cost_lines(run_dir)
    from kernel_forge.reports.heatmap import CAPTION
    for p in plots:
        lines += [f"![{p}]({p})", ""] + ([CAPTION, ""] if p == "heatmap.png" else [])
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
