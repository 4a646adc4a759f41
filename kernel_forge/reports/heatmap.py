"""``heatmap.png``: every gated attempt of a run against every case, at a glance.

A row per attempt the gate judged (in the order gated), a column per case the proposers see
(correctness, then performance) and one for the hidden holdout cases.  A performance cell is
coloured by the attempt's speedup on that case against the run's baseline (the initial kernel, or
the first passing translation): green faster, red slower, on a log scale centred on x1, with the
ratio written in it while the grid is small enough to read.  A correctness or holdout cell that
passed is light grey; every failure is dark with an ``x`` (a row whose kernel never ran --
compile error, static rule -- is dark across, its reason beside its id).  The baseline's and the
best's rows are labelled.  Only the last :data:`MAX_ROWS` attempts are drawn (the baseline and
the best always), which the title says.
"""
from __future__ import annotations

import io
import math

MAX_ROWS = 150
#: a cell's ratio is written in it up to this many cells
ANNOTATE_CELLS = 400

CAPTION = ("heatmap.png: one row per gated attempt, one column per case (and the hidden holdout cases): "
           "performance cells coloured by the speedup on that case against the baseline (green faster, red "
           "slower, log scale around x1), passed correctness and holdout cells light grey, failures dark "
           "with an x.")


def matrix(summary: dict, attempts: list[dict]) -> tuple[list[dict], list[tuple[str, str]], list[list[tuple]]]:
    """(rows, columns, cells): the attempts drawn, the (case, role) columns, and per row and
    column one of ``("speedup", ratio)``, ``("timed", None)`` (passed, no baseline to compare),
    ``("pass", None)``, ``("fail", reason)`` or ``("none", None)`` (not run).  Pure."""
    init_id = (summary.get("initial") or {}).get("id")
    best_id = (summary.get("best") or {}).get("id")
    gated = [a for a in attempts if a.get("evaluation") is not None]
    if len(gated) > MAX_ROWS:
        keep = {init_id, best_id}
        tail = gated[-MAX_ROWS:]
        gated = [a for a in gated if a["id"] in keep and a not in tail] + tail
    columns: list[tuple[str, str]] = []
    for a in gated:
        for c in (a["evaluation"] or {}).get("cases", []):
            if c.get("role") != "holdout" and (c["name"], c["role"]) not in columns:
                columns.append((c["name"], c["role"]))
    columns.sort(key=lambda nc: (nc[1] != "correctness", 0))
    columns.append(("holdout", "holdout"))
    base = next((a for a in attempts if a["id"] == init_id), None)
    base_us = {c["name"]: c["timing"]["median"] for c in ((base or {}).get("evaluation") or {}).get("cases", [])
               if c.get("timing")}
    cells = []
    for a in gated:
        by = {c["name"]: c for c in (a["evaluation"] or {}).get("cases", [])}
        early = not by and a.get("status") == "failed"
        row = []
        for name, role in columns:
            if role == "holdout":
                hold = a.get("holdout")
                if a["id"] == init_id and a.get("proposer") == "initial":
                    hold = {"passed": all(c.get("passed") for c in by.values() if c.get("role") == "holdout")} \
                        if any(c.get("role") == "holdout" for c in by.values()) else hold
                row.append(("none", None) if hold is None else ("pass", None) if hold.get("passed")
                           else ("fail", "holdout"))
                continue
            c = by.get(name)
            if c is None:
                row.append(("fail", a.get("reason") or "failed") if early else ("none", None))
            elif not c.get("passed"):
                row.append(("fail", c.get("reason") or "failed") if c.get("reason") != "skipped" else ("none", None))
            elif c.get("timing") and name in base_us and c["timing"].get("median"):
                row.append(("speedup", base_us[name] / c["timing"]["median"]))
            elif c.get("timing"):
                row.append(("timed", None))
            else:
                row.append(("pass", None))
        cells.append(row)
    return gated, columns, cells


def draw_heatmap(run_dir, summary: dict, attempts: list[dict]) -> bool:
    """Write ``heatmap.png`` into the run folder; False when there is nothing to draw (or no matplotlib)."""
    rows, columns, cells = matrix(summary, attempts)
    if not rows:
        return False
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import TwoSlopeNorm
    except ImportError:
        return False
    import numpy as np

    n, m = len(rows), len(columns)
    logs = [math.log2(v) for row in cells for kind, v in row if kind == "speedup" and v > 0]
    span = max([1.0] + [abs(x) for x in logs])
    values = np.full((n, m), np.nan)
    for i, row in enumerate(cells):
        for j, (kind, v) in enumerate(row):
            if kind == "speedup" and v > 0:
                values[i, j] = math.log2(v)
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="white")
    fig_h = min(40.0, 1.6 + 0.26 * n)
    fig_w = min(24.0, 4.0 + 1.1 * m)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    im = ax.imshow(values, aspect="auto", cmap=cmap, norm=TwoSlopeNorm(vmin=-span, vcenter=0.0, vmax=span),
                   interpolation="nearest")
    small = n * m <= ANNOTATE_CELLS
    for i, row in enumerate(cells):
        for j, (kind, v) in enumerate(row):
            if kind in ("pass", "timed"):
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="#dddddd", lw=0))
            elif kind == "fail":
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="#444444", lw=0))
                ax.text(j, i, "x", ha="center", va="center", color="#ff6666", fontsize=9, fontweight="bold")
            elif kind == "speedup":
                if rows[i].get("status") == "failed":    # timed, but the attempt failed elsewhere: faded
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="white", alpha=0.65, lw=0))
                if small:
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="#777777" if rows[i].get("status") == "failed" else "black")
    init_id = (summary.get("initial") or {}).get("id")
    best_id = (summary.get("best") or {}).get("id")
    labels = []
    for a in rows:
        tag = a["id"]
        if a["id"] == init_id:
            tag += " baseline"
        if a["id"] == best_id and best_id != init_id:
            tag += " best"
        defines = " ".join(f"{k}={v}" for k, v in sorted((a.get("defines") or {}).items()))
        if defines:
            tag += f" {defines[:32]}"
        if a.get("status") == "failed":
            tag += f" ({a.get('reason')})"
        labels.append(tag)
    step = max(1, n // 60)
    ax.set_yticks(range(0, n, step), labels[::step], fontsize=7 if n > 30 else 8)
    ax.set_xticks(range(m), [f"{name}\n({role})" for name, role in columns], fontsize=8)
    ax.xaxis.tick_top()
    shown = sum(a.get("evaluation") is not None for a in attempts)
    title = f"{summary.get('task', '')}: attempts x cases, speedup vs baseline {init_id or '(none)'}"
    if shown > n:
        title += f" (last {n} of {shown} gated attempts)"
    ax.set_title(title, fontsize=9, pad=28)
    bar = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    ticks = [t for t in range(-math.ceil(span), math.ceil(span) + 1) if -span <= t <= span]
    bar.set_ticks(ticks)
    bar.set_ticklabels([f"x{2.0 ** t:g}" for t in ticks])
    bar.set_label("x vs baseline", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    run_dir.write_bytes("heatmap.png", buf.getvalue())
    return True
