"""The search simulator's outputs (bench/search_sim.py): SEARCH.md, search-sim.json and the plot of
the median best-so-far curves per strategy."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from kernel_forge.common.stats import geomean

from bench.search_sim_pools import STRATEGIES, WITHIN


def median_curves(rows: list[dict]) -> dict[str, list[float]]:
    """``"task/mode/strategy"`` -> the median over seeds of best/pool-best after each proposal."""
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(f"{r['task']}/{r['mode']}/{r['strategy']}", []).append(r["curve"])
    out = {}
    for k, curves in groups.items():
        n = max(len(c) for c in curves)
        out[k] = [round(statistics.median([c[min(i, len(c) - 1)] for c in curves]), 5) for i in range(n)]
    return out


def write_outputs(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    slim = {k: v for k, v in results.items() if k != "rows"}
    if results.get("rows"):
        slim["curves"] = median_curves(results["rows"])
    (out / "search-sim.json").write_text(json.dumps(slim, indent=1, default=str))
    (out / "SEARCH.md").write_text(render_table(slim))
    plot(slim, out / "search-sim.png")


def render_table(results: dict) -> str:
    lines = ["# The search, benchmarked offline", "",
             f"Source: `{results['source']}` ({'complete recording' if results['complete'] else 'partial: settings the recording lacks are imputed from their nearest recorded neighbours'}); "
             f"{results['seeds']} seeds per strategy; `python bench/search_sim.py` (see its docstring for the simulated model).",
             "", "Columns: proposals (settings gated by the tuner; model answers, failures and duplicates included) "
             f"until the best is within {100 * results['within']:.0f} % of the best kernel in the pool — median over "
             "seeds (a run that never got there counts as the budget + 1) and how many seeds got there; the best "
             "reached after a fixed number of proposals as a ratio to the pool's best (geomean over seeds, 1.000 is "
             "the best); the share of proposals that were duplicates.", ""]
    if not results.get("complete"):
        lines += ["**Provisional.** Most settings in this pool were never gated on the H200 (the runs recorded only "
                  "what the tuner of their day sampled); the column \"settings (imputed)\" says how many of them are "
                  "estimated from their nearest recorded neighbours, which makes the landscapes smoother than they are. "
                  "Rebuild this file from a complete recording: `bash bench/device_search.sh` on the GPU machine "
                  "(every valid setting of every template of every bundled task, about 3 minutes), then "
                  "`python bench/search_sim.py --recording OUT/search-recording.json.gz --seeds 20 --out bench`.", ""]
    for mode, title in (("tune", "Built-in tuner (every template, until every setting is gated)"),
                        ("model", "Simulated model proposals (4 per iteration)")):
        rows = [(t, info) for t, info in results["tasks"].items() if mode in info["modes"]]
        if not rows:
            continue
        lines += [f"## {title}", ""]
        budgets = sorted({int(n) for _, info in rows for s in info["modes"][mode].values() for n in s["best_at"]})
        head = ["task", "settings (imputed)", "strategy", "to within 5 % (median)", "reached"] + \
            [f"best @ {n}" for n in budgets] + ["duplicates"]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        wins: dict[str, list[float]] = {}
        for task, info in rows:
            for strat, s in info["modes"][mode].items():
                wins.setdefault(strat, []).append(s["reach_median"])
                lines.append("| " + " | ".join([task, f"{info['settings']} ({info['imputed']})", strat,
                                                f"{s['reach_median']:.1f}", f"{s['reached']}/{s['runs']}"]
                                               + [f"{s['best_at'][n] if n in s['best_at'] else s['best_at'][str(n)]:.3f}"
                                                  for n in budgets] + [f"{100 * s['duplicate_rate']:.1f} %"]) + " |")
        lines += ["", "Geometric mean over tasks of the median proposals to within 5 %: "
                  + ", ".join(f"**{k}** {geomean(v):.1f}" for k, v in sorted(wins.items(), key=lambda kv: geomean(kv[1])))
                  + ".", ""]
    both: dict[str, list[float]] = {}
    for info in results["tasks"].values():
        for mode, per in info["modes"].items():
            for strat, st in per.items():
                both.setdefault(strat, []).append(st["reach_median"])
    full = {k: v for k, v in both.items() if len(v) == max(len(x) for x in both.values())}
    if len(full) > 1:
        lines += ["Over both modes (strategies run in both): " + ", ".join(
            f"**{k}** {geomean(v):.1f}" for k, v in sorted(full.items(), key=lambda kv: geomean(kv[1]))) + ".", ""]
    from kernel_forge.search.strategies import DEFAULT
    lines += [f"The default strategy (`--search`, `kernel_forge/search/strategies.py` `DEFAULT`) is **{DEFAULT}**.", ""]
    lines.append("![best so far against proposals](search-sim.png)")
    return "\n".join(lines) + "\n"


COLOURS = {"greedy": "tab:green", "population": "tab:red", "anneal": "tab:blue", "brute": "tab:orange"}


def plot(results: dict, path: Path) -> None:
    """One panel per task and mode: the median best/pool-best against proposals, per strategy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = results.get("curves") or {}
    panels = [(t, m) for t in results["tasks"] for m in ("tune", "model")
              if any(k.startswith(f"{t}/{m}/") for k in curves)]
    if not panels:
        return
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, (task, mode) in zip(axes.flat, panels):
        for strat in STRATEGIES:
            med = curves.get(f"{task}/{mode}/{strat}")
            if med:
                ax.plot(range(1, len(med) + 1), med, label=strat, color=COLOURS[strat])
        ax.axhline(1 + WITHIN, color="grey", lw=0.8, ls="--")
        ax.set_title(f"{task} ({'built-in tuner' if mode == 'tune' else 'simulated model'})", fontsize=9)
        ax.set_xlabel("proposals", fontsize=8)
        ax.set_ylabel("best / pool best (median of seeds)", fontsize=8)
        ax.set_ylim(0.98, min(2.5, ax.get_ylim()[1]))
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def redraw(json_path: Path, out: Path) -> None:
    """SEARCH.md and the plot again from a search-sim.json (no simulation)."""
    results = json.loads(json_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    (out / "SEARCH.md").write_text(render_table(results))
    plot(results, out / "search-sim.png")

