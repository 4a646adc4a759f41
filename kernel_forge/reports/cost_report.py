"""What the models of a run cost, per model and per iteration, from its ``model-NNN.json`` files.

Each file is one call with the provider's own token counts (input, of which read from and written
to the prompt cache, output, of which reasoning) and its cost at the capability table's prices;
:func:`cost_lines` sums them for ``report.md``.  A call of a model the table does not price
counts 0.
"""
from __future__ import annotations

from kernel_forge.common.errors import InputError
from kernel_forge.common.reads import loads
from pathlib import Path

FIELDS = ("calls", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
          "reasoning_tokens", "cost_usd")


def _calls(run_dir) -> list[dict]:
    path = Path(getattr(run_dir, "path", run_dir))
    out = []
    for f in sorted(path.glob("model-*.json")):
        try:
            out.append(loads(f.read_text(encoding="utf-8"), str(f)))
        except (OSError, ValueError, InputError):
            continue                 # a damaged file is reported by the evidence checks, not here
    return out


def cost_rows(calls: list[dict], key) -> dict:
    rows: dict = {}
    for c in calls:
        k = key(c)
        r = rows.setdefault(k, {f: 0 for f in FIELDS} | {"cost_usd": 0.0, "errors": 0})
        r["calls"] += 1
        for f in FIELDS[1:-1]:
            r[f] += int(c.get(f) or 0)
        r["cost_usd"] += float(c.get("cost_usd") or 0.0)
        r["errors"] += c.get("error") is not None
    return rows


def _table(title: str, rows: dict, label: str) -> list[str]:
    lines = [f"### {title}", "", f"| {label} | calls | input tokens | cache read | cache written | output tokens "
             "| of which reasoning | cost $ |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k, r in rows.items():
        lines.append(f"| {k} | {r['calls']}" + (f" ({r['errors']} not used)" if r["errors"] else "")
                     + f" | {r['input_tokens']} | {r['cache_read_tokens']} | {r['cache_write_tokens']} | "
                     f"{r['output_tokens']} | {r['reasoning_tokens']} | {r['cost_usd']:.4f} |")
    total = sum(r["cost_usd"] for r in rows.values())
    return lines + [f"| total | {sum(r['calls'] for r in rows.values())} | | | | | | {total:.4f} |", ""]


def cost_lines(run_dir) -> list[str]:
    """The "Model cost" section of ``report.md`` (nothing when the run asked no model)."""
    calls = _calls(run_dir)
    if not calls:
        return []
    by_model = cost_rows(calls, lambda c: f"{c.get('provider')}:{c.get('model')}")
    by_iteration = cost_rows(calls, lambda c: c.get("iteration"))
    read = sum(r["cache_read_tokens"] for r in by_model.values())
    total_in = sum(r["input_tokens"] for r in by_model.values())
    lines = ["## Model cost", "",
             f"{len(calls)} model call(s); {read} of {total_in} input tokens read from the prompt cache. "
             "Costs at the capability table's prices (kernel_forge/data/models.json), each call's in its model-NNN.json.",
             ""]
    return lines + _table("Per model", by_model, "model") + _table("Per iteration", by_iteration, "iteration")
