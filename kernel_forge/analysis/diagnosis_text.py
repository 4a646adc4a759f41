"""The diagnosis of one case as the prompt shows it: its time, roofline figures, references,
resources and occupancy, profiler line and bound, one line each."""
from __future__ import annotations

from kernel_forge.analysis.case_diagnosis import CaseDiagnosis
from kernel_forge.analysis.limiter import TAIL_IDLE, wave_tail
from kernel_forge.analysis.profile_reading import stall_text

__all__ = ["case_line", "us"]


def us(x: float) -> str:
    """A time in µs with the digits that matter."""
    return f"{x:.2f}" if x < 100 else f"{x:.1f}" if x < 10000 else f"{x:.0f}"


def case_line(c: CaseDiagnosis, peak: dict | None) -> str:
    size = ", ".join(f"{k}={v}" for k, v in c.vars.items())
    t = f"{us(c.median_us)} µs" + (f" (p10 {us(c.p10_us)}, p90 {us(c.p90_us)})" if c.p10_us is not None else "")
    parts = [f"- {c.name}" + (f" ({size})" if size else "") + f": {t}"]
    figs = []
    if c.pct_bandwidth is not None:
        figs.append(f"{c.pct_bandwidth:.1f}% of bandwidth")
    if c.pct_compute is not None and peak:
        figs.append(f"{c.pct_compute:.1f}% of the {peak['key']} peak")
    if c.intensity is not None:
        figs.append(f"{c.intensity:.1f} FLOP/byte")
    if figs:
        parts.append(", ".join(figs))
    parts.append(_bound_text(c))
    tail = wave_tail(c)
    if tail is not None and tail["idle"] >= TAIL_IDLE:
        parts.append(f"{c.waves:.2f} waves of {c.blocks} blocks: the last wave is {100 * tail['last_full']:.0f}% full, "
                     f"so about {100 * tail['idle']:.0f}% of the SM time is idle in the tail")
    refs = [f"vs {b} {us(c.baseline_us[b])} µs: x{r:.2f}{' (slower)' if r < 1 else ''}"
            for b, r in c.vs_baselines.items()]
    if c.vs_initial is not None:
        refs.append(f"vs initial {us(c.initial_us)} µs: x{c.vs_initial:.2f}{' (slower)' if c.vs_initial < 1 else ''}")
    if refs:
        parts.append("; ".join(refs))
    out = "; ".join(parts)
    r = c.resources
    if r:
        spill = (r.get("spill_stores") or 0) + (r.get("spill_loads") or 0)
        res = (f"  resources ({c.resources_source}): {r.get('registers', '?')} registers/thread, "
               + (f"{r.get('spill_stores', 0)} B spill stores + {r.get('spill_loads', 0)} B spill loads"
                  if spill else "no spills")
               + f", shared memory {r.get('static_smem', 0)} B static + {r.get('dynamic_smem', 0)} B dynamic per block")
        if r.get("blocks_per_sm") is not None:
            res += (f"; {r['blocks_per_sm']} blocks of {r.get('threads_per_block', '?')} threads "
                    f"({r.get('warps_per_sm', '?')} warps) per SM = {100 * (r.get('occupancy') or 0):.0f}% "
                    "theoretical occupancy")
            if (r.get("occupancy") or 0) < 1:
                res += f", limited by {r.get('occupancy_limiter', '?')}"
        if r.get("problem"):
            res += f" ({r['problem']})"
        out += "\n" + res
    p = c.profile
    if p:
        out += "\n" + _profile_line(p)
    return out


def _pct(x) -> str:
    return "?" if x is None else f"{x:.1f}%"


def _profile_line(p: dict) -> str:
    """The ncu line of one case: throughputs, the pipes, shared memory, caches, occupancy
    (achieved, beside the theoretical ncu computes), stalls."""
    prof = (f"  ncu: DRAM {_pct(p.get('dram_pct'))}, L2 {_pct(p.get('l2_pct'))}, SM {_pct(p.get('sm_pct'))} of peak"
            + (" (SM: its busiest sub-unit, not the FMA pipe)" if p.get("sm_pct") is not None else ""))
    pipes = [(name, p.get(k)) for name, k in (("FMA pipe", "fma_pipe_pct"), ("tensor pipe", "tensor_pct"),
                                              ("LSU issue", "lsu_issue_pct"), ("MIO issue", "mio_issue_pct"),
                                              ("ALU issue", "alu_issue_pct"), ("XU issue", "xu_issue_pct"),
                                              ("issue slots", "issue_active_pct"))]
    tensor = [v for v in (p.get("tensor_hmma_pct"), p.get("tensor_gmma_pct")) if v is not None]
    pipes = [(n, (max(tensor) if tensor else None) if n == "tensor pipe" else v) for n, v in pipes]
    shown = [f"{n} {v:.1f}%" for n, v in pipes if v is not None]
    if shown:
        prof += "; " + ", ".join(shown)
    ld, wf, cf = p.get("shared_ld_instructions"), p.get("shared_ld_wavefronts"), p.get("shared_ld_conflicts")
    if wf is not None:
        prof += f"; shared loads {wf:.3g} wavefronts" + (f" for {ld:.3g} instructions" if ld else "")
        if cf is not None:
            prof += f", {cf:.3g} bank conflicts"
    if p.get("l1_hit_pct") is not None or p.get("l2_hit_pct") is not None:
        prof += f"; hit rates L1 {_pct(p.get('l1_hit_pct'))}, L2 {_pct(p.get('l2_hit_pct'))}"
    prof += f"; achieved occupancy {_pct(p.get('achieved_occupancy_pct'))}"
    if p.get("theoretical_occupancy_pct") is not None:
        prof += f" (theoretical {_pct(p.get('theoretical_occupancy_pct'))})"
    stalls = p.get("stalls") or []
    if stalls:
        prof += "; top warp stalls: " + stall_text(stalls)
    return prof


def _bound_text(c: CaseDiagnosis) -> str:
    lim = c.limiter
    if c.bound == "pipe" and lim:
        return (f"limited by {lim['what']} ({lim['evidence']}) — below the {(c.pipe_busy or {}).get('pipe', 'FMA')} "
                f"roof, not compute-bound, although {c.bound_why}")
    text = f"{c.bound}-bound" + (f" ({c.bound_why})" if c.bound_why else "")
    if lim:
        text += f"; the profile names {lim['what']} ({lim['evidence']})"
    return text
