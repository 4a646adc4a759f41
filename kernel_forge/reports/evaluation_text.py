"""Text tables and JSON for ``kforge eval`` (one row per case)."""
from __future__ import annotations

from kernel_forge.model.verdict import Evaluation


def _fmt(x, spec: str, dash: str = "-") -> str:
    return dash if x is None else format(x, spec)


def worst_of_tolerance(outputs: list[dict]) -> float | None:
    """The largest ``tol_ratio`` over a case's outputs (1.0 = an element at its tolerance), or None."""
    vals = []
    for o in outputs:
        v = o.get("tol_ratio")
        if isinstance(v, (int, float)):
            vals.append(float(v))
        elif isinstance(v, str):
            vals.append(float(v))      # "inf" / "nan"
    return max(vals) if vals else None


def speedups(ev: Evaluation, other: Evaluation | None) -> dict[str, float]:
    """Per performance case: other's median / ev's median (>1 means ev is faster)."""
    if other is None:
        return {}
    out = {}
    for c in ev.cases:
        o = other.case(c.name)
        if c.timing and o is not None and o.timing and c.timing.median > 0:
            out[c.name] = o.timing.median / c.timing.median
    return out


def eval_json(task, ev: Evaluation, initial: Evaluation | None, baselines: dict[str, Evaluation],
              device: dict | None, calibration: dict | None, options: dict) -> dict:
    rows = []
    vs_init = speedups(ev, initial)
    vs_base = {k: speedups(ev, b) for k, b in baselines.items()}
    for c in ev.cases:
        row = c.to_json()
        row["speedup_vs_initial"] = vs_init.get(c.name)
        row["speedup_vs_baselines"] = {k: v.get(c.name) for k, v in vs_base.items()}
        rows.append(row)
    score = {"candidate_us": ev.score_us,
             "initial_us": initial.score_us if initial else None,
             "baselines_us": {k: b.score_us for k, b in baselines.items()}}
    return {"task": task.name, "manifest": str(task.path), "candidate": ev.label, "passed": ev.passed,
            "reason": ev.reason, "message": ev.message, "score": score, "cases": rows,
            "compile": ev.compile, "defines": ev.defines, "dispatch": ev.dispatch, "seconds": ev.seconds,
            "initial": initial.to_json(False) if initial else None,
            "baselines": {k: b.to_json(False) for k, b in baselines.items()},
            "device": device, "calibration": calibration, "options": options}


def eval_table(task, ev: Evaluation, initial: Evaluation | None, baselines: dict[str, Evaluation]) -> str:
    vs_init = speedups(ev, initial)
    vs_base = {k: speedups(ev, b) for k, b in baselines.items()}
    head = ["case", "role", "verdict", "max abs", "max rel", "worst/tol", "median µs", "p10-p90 µs", "cv",
            "GB/s", "TFLOP/s", "%peak bw", "%peak fp32"]
    if initial is not None:
        head.append("x initial")
    head += [f"x {k}" for k in baselines]
    rule = any(c.variant for c in ev.cases)      # a dispatch rule: the line each case ran with
    if rule:
        head.append("variant")
    rows = [head]
    for c in ev.cases:
        max_abs = max((o.get("max_abs") for o in c.outputs if isinstance(o.get("max_abs"), (int, float))), default=None)
        max_rel = max((o.get("max_rel") for o in c.outputs if isinstance(o.get("max_rel"), (int, float))), default=None)
        t = c.timing
        row = [c.name, c.role, "pass" if c.passed else c.reason,
               _fmt(max_abs, ".2e"), _fmt(max_rel, ".2e"), _fmt(worst_of_tolerance(c.outputs), ".2f"),
               _fmt(t.median if t else None, ".2f"),
               f"{t.p10:.2f}-{t.p90:.2f}" if t else "-",
               _fmt(t.cv if t else None, ".3f"),
               _fmt(c.gbps, ".1f"), _fmt(c.tflops, ".3f"),
               _fmt(c.pct_peak_bw, ".1f"), _fmt(c.pct_peak_flops, ".1f")]
        if initial is not None:
            row.append(_fmt(vs_init.get(c.name), ".2f"))
        row += [_fmt(vs_base[k].get(c.name), ".2f") for k in baselines]
        if rule:
            row.append(f"{c.variant['branch'] + 1}: {c.variant['when']}" if c.variant else "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    out = "\n".join(lines)
    summary = [f"{task.name}: {ev.label}: {'PASSED' if ev.passed else 'FAILED (' + ev.reason + ')'}"]
    if ev.score_us is not None:
        s = f"score (geomean of performance medians) {ev.score_us:.2f} µs"
        if initial is not None and initial.score_us:
            s += f"; x{initial.score_us / ev.score_us:.2f} vs initial"
        for k, b in baselines.items():
            if b.score_us:
                s += f"; x{b.score_us / ev.score_us:.2f} vs {k}"
        summary.append(s)
    if ev.dispatch:
        summary.append("dispatch rule (first line whose condition holds): " + "; ".join(
            f"{i + 1}. {b['when'] or 'default'} -> " + ", ".join(f"{k}={v}" for k, v in sorted(b["defines"].items()))
            for i, b in enumerate(ev.dispatch)))
    for c in ev.cases:
        if not c.passed and c.message:
            summary.append(f"  {c.name}: {c.reason}: {c.message}")
    if not ev.cases and ev.message:
        summary.append(f"  {ev.reason}: {ev.message}")
    return out + "\n" + "\n".join(summary)
