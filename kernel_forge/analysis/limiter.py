"""What limits a kernel on one case, where the evidence names it: how busy the task's arithmetic
pipe is, the limit :func:`name_limit` reads from the warp stalls, the pipe metrics and the
instruction mix of the hot loop (shared-memory issue, bank conflicts, global-memory latency, the
load/store queue, barriers, the issue slots, another math pipe), each with its advice, and the
idle tail of the last wave."""
from __future__ import annotations

from kernel_forge.analysis.case_diagnosis import CaseDiagnosis
from kernel_forge.gpu import instruction_mix as imix

__all__ = ["LIMITS", "PIPE_BUSY_PCT", "TAIL_IDLE", "ffma_issue_share", "limit_entry", "name_limit", "pipe_busy",
           "wave_tail"]

#: the arithmetic pipe counts as busy (the kernel as compute-bound) from this % of its peak
PIPE_BUSY_PCT = 60.0
#: a warp-stall reason names the limit from this share of stalled warps
STALL_NAMES_LIMIT = 0.2
#: fewer FFMA than this per shared-memory load in the hot loop is a shared-memory-issue-bound loop
FEW_FFMA_PER_LDS = 4.0
#: bank conflicts worth naming: extra wavefronts per shared-memory wavefront
CONFLICT_SHARE = 0.2
#: the issue slots limit a kernel from this % of cycles busy (or not_selected >= 25 % of stalls) ...
ISSUE_BUSY_PCT = 70.0
#: ... while fewer than this share of the issued instructions are the task's FMAs
FFMA_ISSUE_SHARE = 0.9
#: a last wave less full than this (and more than one wave) is a tail worth naming
TAIL_FULL = 0.9
#: a wave tail idling less of the SM time than this is not worth a line or a direction
TAIL_IDLE = 0.02


def pipe_busy(peak_key: str | None, pct_compute: float | None, profile: dict | None) -> dict | None:
    """How busy the pipe that does the task's arithmetic is: ncu's pipe cycles where measured
    (the tensor pipe for a 16-bit matrix task, else the FMA pipe), else the useful FLOP rate
    against the peak (a lower bound: the pipe also runs address arithmetic)."""
    p = profile or {}
    tensor = peak_key in ("tensor16", "tf32x3")
    if tensor:
        t = [v for v in (p.get("tensor_hmma_pct"), p.get("tensor_gmma_pct")) if v is not None]
        if t:
            return {"pct": max(t), "pipe": "tensor", "source": "ncu pipe cycles"}
    elif p.get("fma_pipe_pct") is not None:
        return {"pct": p["fma_pipe_pct"], "pipe": "FMA", "source": "ncu pipe cycles"}
    if pct_compute is not None:
        return {"pct": pct_compute, "pipe": "tensor" if tensor else "FMA", "source": "useful FLOP rate"}
    return None


# -- naming the limit --------------------------------------------------------------------------
LIMITS = {
    "shared_conflicts": ("shared-memory bank conflicts",
                         "make each quarter-warp's shared-memory addresses fall in distinct banks: pad the inner "
                         "dimension (+1 float for 32-bit accesses, +4 for float4 rows) or swizzle the column with the "
                         "row (col ^ row), and keep each lane's 128-bit accesses contiguous"),
    "shared_issue": ("shared-memory instruction issue",
                     "make every shared-memory load feed more FMAs: a register tile per thread (e.g. 8x8 outputs "
                     "from 8 + 8 values per k: 64 FFMA per 4 LDS.128), 128-bit loads (float4) of fragments laid out "
                     "contiguously per lane (A stored transposed, As[k][m]), warp tiling so a warp reads few distinct "
                     "addresses, and the fragments of step k+1 loaded while step k is multiplied"),
    "shared_latency": ("shared-memory load latency",
                       "hide the latency of shared-memory loads: load the fragments of the next k-step into registers "
                       "before the FMAs of this one (register double buffering) and unroll the k loop"),
    "mufu_issue": ("special-function (MUFU) issue",
                   "fewer transcendental instructions per element: reuse exp/rsqrt results, hoist a division into "
                   "one reciprocal, the __expf/__fdividef intrinsics where the tolerance allows"),
    "shfl_issue": ("warp-shuffle issue",
                   "fewer shuffles: reduce several values per lane in registers first, then one shuffle tree per "
                   "row or block, not per element"),
    "mio_issue": ("MIO instruction issue (shared memory, shuffles or special functions)",
                  "fewer MIO instructions per useful operation: wider shared-memory accesses, values reused from "
                  "registers, fewer shuffles and transcendental calls"),
    "global_latency": ("global-memory latency",
                       "keep more global loads in flight: issue the next tile's loads before computing this one "
                       "(register prefetch, or cp.async double/multi-stage buffering), several independent 16-byte "
                       "loads per thread, more resident warps per SM"),
    "lsu_queue": ("the global load/store queue",
                  "fewer, wider global accesses: 16-byte vectors (float4/uint4) with a scalar tail, each element "
                  "read and written once"),
    "barrier": ("barrier waits (__syncthreads)",
                "fewer barriers per unit of work: larger steps between them, double-buffered shared tiles (one "
                "barrier per step), warp-shuffle reductions instead of shared-memory trees, several blocks per SM"),
    "issue_slots": ("instruction issue (the schedulers issue every cycle, mostly not FMAs)",
                    "fewer instructions per FMA: hoist index arithmetic out of the loop, advance pointers instead of "
                    "recomputing 64-bit addresses, fully unroll the inner loop, 128-bit loads"),
    "math_other": ("a non-FMA math pipe (ALU/XU)",
                   "move work off the saturated pipe: fewer integer/compare/convert instructions in the loop, "
                   "fewer special functions, precomputed values"),
    "dependency": ("dependent-instruction latency (wait stalls)",
                   "more independent instructions per thread: several accumulators, unrolled loops, loads issued "
                   "long before their use"),
    "unnamed": ("something other than the arithmetic pipe (no profiler stalls to name it)",
                "profile it (ncu) to see which stall dominates; a register-tiled structure with 128-bit loads and "
                "double buffering fixes the usual ones"),
}


def _share(stalls: list[dict], reason: str) -> float:
    """A stall's share of stalled warps; a stall named without a share counts 0.5 when first, else 0.25."""
    for i, s in enumerate(stalls):
        if s.get("reason") == reason:
            v = s.get("share")
            return float(v) if isinstance(v, (int, float)) else (0.5 if i == 0 else 0.25)
    return 0.0


def _stall_desc(stalls: list[dict], reason: str, tail: str = " of stalled warps") -> str:
    """``mio_throttle 46% of stalled warps``, or ``mio_throttle (listed first, no share given)``."""
    for i, s in enumerate(stalls):
        if s.get("reason") == reason:
            v = s.get("share")
            if isinstance(v, (int, float)):
                return f"{reason} {100 * v:.0f}%{tail}"
            return f"{reason} ({'the top stall' if i == 0 else 'a top stall'}; no share given)"
    return ""


def _frac(a: int, b: int) -> str:
    import math
    g = math.gcd(a, b) or 1
    return f"{a // g} LDS per {b // g} FFMA"


def limit_entry(key: str, evidence: list[str]) -> dict:
    what, advice = LIMITS[key]
    return {"key": key, "what": what, "evidence": "; ".join(e for e in evidence if e), "advice": advice}


def name_limit(c: CaseDiagnosis, mix: dict | None) -> dict | None:
    """What limits case ``c``, from its profile's stalls and pipe metrics and the kernel's
    instruction mix, or None where nothing names it (see :data:`LIMITS`)."""
    p = c.profile or {}
    stalls = p.get("stalls") or []
    r = imix.ratios(mix) if mix and not mix.get("error") else {}
    counts = {}
    if r:
        hl = mix.get("hot_loop")
        counts = (hl or {}).get("counts") or mix.get("kernel") or {}
    busy = c.pipe_busy
    busy_txt = (f"{busy['pipe']} pipe {busy['pct']:.0f}% busy ({busy['source']})"
                if busy and c.bound in ("pipe", "compute") else "")
    lds_txt = ""
    if r.get("lds") and r.get("ffma"):
        lds_txt = (f"hot loop {_frac(r['lds'], r['ffma'])}" if r["ffma_per_lds"] < 1
                   else f"hot loop {r['ffma_per_lds']:.1f} FFMA per shared-memory load")
        if r.get("lds_bits"):
            lds_txt += f", {r['lds_bits']}-bit LDS"
    cands: list[tuple[float, dict]] = []

    wf = (p.get("shared_ld_wavefronts") or 0) + (p.get("shared_st_wavefronts") or 0)
    cf = (p.get("shared_ld_conflicts") or 0) + (p.get("shared_st_conflicts") or 0)
    mio = max(_share(stalls, "mio_throttle"), _share(stalls, "short_scoreboard"))
    if wf and cf / wf >= CONFLICT_SHARE and (mio >= 0.15 or not stalls):
        cands.append((cf / wf + mio, limit_entry("shared_conflicts", [
            f"{100 * cf / wf:.0f}% of shared-memory wavefronts are bank-conflict replays ({cf:.3g} of {wf:.3g})",
            busy_txt])))
    mt = _share(stalls, "mio_throttle")
    ss = _share(stalls, "short_scoreboard")
    shared_heavy = bool(r) and r.get("ffma_per_lds", 99.0) < FEW_FFMA_PER_LDS and r.get("lds", 0) > 0
    mio_pct = p.get("mio_issue_pct")
    if mt >= STALL_NAMES_LIMIT or (mio_pct is not None and mio_pct >= 70) or (ss >= 0.25 and shared_heavy):
        why = [_stall_desc(stalls, "mio_throttle") if mt else "",
               _stall_desc(stalls, "short_scoreboard", "") if ss >= 0.25 else "",
               f"MIO issue {mio_pct:.0f}% of peak" if mio_pct is not None else ""]
        shared = r.get("shared", 0)
        mufu, shfl = counts.get("mufu", 0), counts.get("shfl", 0)
        if r and mufu > shared and mufu >= shfl:
            key, extra = "mufu_issue", f"hot loop {mufu} MUFU, {shared} shared-memory instructions"
        elif r and shfl > shared:
            key, extra = "shfl_issue", f"hot loop {shfl} SHFL, {shared} shared-memory instructions"
        elif r and shared:
            key, extra = "shared_issue", lds_txt or f"hot loop {shared} shared-memory instructions"
        elif r:
            key, extra = "mio_issue", ""
        else:
            key, extra = "mio_issue", "no instruction mix to say which MIO instructions"
        cands.append((max(mt, ss, (mio_pct or 0) / 100), limit_entry(key, why + [extra, busy_txt])))
    elif ss >= 0.25:
        cands.append((ss, limit_entry("shared_latency", [_stall_desc(stalls, "short_scoreboard"),
                                                    lds_txt, busy_txt])))
    for reason, key, floor in (("long_scoreboard", "global_latency", 0.3), ("lg_throttle", "lsu_queue", STALL_NAMES_LIMIT),
                               ("barrier", "barrier", 0.25), ("wait", "dependency", 0.25)):
        v = _share(stalls, reason)
        if v >= floor:
            extra = ""
            if key == "lsu_queue" and r:
                w = ((mix.get("hot_loop") or {}).get("widths") or mix.get("kernel_widths") or {}).get("ldg") or {}
                narrow = sum(n for b, n in w.items() if int(b) < 128)
                if narrow:
                    extra = f"{narrow} of {sum(w.values())} global loads in the hot loop narrower than 128 bits"
            cands.append((v, limit_entry(key, [_stall_desc(stalls, reason), extra, busy_txt])))
    mp = _share(stalls, "math_pipe_throttle")
    if mp >= STALL_NAMES_LIMIT and not (busy and busy["pct"] >= PIPE_BUSY_PCT):
        cands.append((mp, limit_entry("math_other", [_stall_desc(stalls, "math_pipe_throttle"),
                                                f"ALU issue {p['alu_issue_pct']:.0f}%" if p.get("alu_issue_pct") is not None else "",
                                                f"XU issue {p['xu_issue_pct']:.0f}%" if p.get("xu_issue_pct") is not None else "",
                                                busy_txt])))
    ns = _share(stalls, "not_selected")
    issue = p.get("issue_active_pct")
    share, share_txt = ffma_issue_share(p, r)
    if (issue is not None and issue >= ISSUE_BUSY_PCT) or ns >= 0.25:
        # a busy FMA pipe does not switch this off: at 66 % of the FMA peak with the issue slots 79 %
        # busy and one instruction in five not an FFMA, issue is what is left to win
        busy_pipe = bool(busy and busy["pct"] >= PIPE_BUSY_PCT)
        if not busy_pipe or (share is not None and share < FFMA_ISSUE_SHARE):
            lim = limit_entry("issue_slots", [
                f"issue slots {issue:.0f}% busy" if issue is not None else "",
                _stall_desc(stalls, "not_selected", " (warps ready, the scheduler busy)") if ns else "",
                share_txt, busy_txt])
            if busy_pipe:
                lim["what"] = "instruction issue (the schedulers are busy and not every issued instruction is an FMA)"
                lim["advice"] = _issue_advice(r, counts)
            cands.append((max(ns, (issue or 0) / 100 - 0.5), lim))
    if cands:
        return max(cands, key=lambda t: t[0])[1]
    if shared_heavy and not stalls:
        return limit_entry("shared_issue", [lds_txt + " (no profiler stalls)", busy_txt])
    if c.bound == "pipe":
        return limit_entry("unnamed", [busy_txt])
    return None


def ffma_issue_share(p: dict, r: dict) -> tuple[float | None, str]:
    """The share of issued instructions that do the task's arithmetic, and how it was measured:
    the hot loop's FFMA (and other FMA) share from the instruction mix, else ncu's FMA-pipe
    instructions over all issued."""
    if r.get("instructions") and r.get("math") is not None and r.get("math_share") is not None:
        return r["math_share"], f"{100 * r['math_share']:.0f}% of the hot loop's instructions are FFMA"
    fma, issue = p.get("fma_issue_pct"), p.get("issue_active_pct")
    if fma is not None and issue:
        share = min(1.0, fma / issue)
        return share, f"{100 * share:.0f}% of issued instructions go to the FMA pipe (ncu)"
    return None, ""


def _issue_advice(r: dict, counts: dict) -> str:
    """What raises the FFMA share of a kernel whose FMA pipe is already busy (nothing it does already)."""
    parts = []
    if r.get("ffma_per_lds") is not None and r["ffma_per_lds"] < 16:
        parts.append(f"a larger per-thread tile so each shared-memory load feeds more FFMAs (now "
                     f"{r['ffma_per_lds']:.1f} FFMA per load)")
    if r.get("lds_bits") is not None and r["lds_bits"] < 128:
        parts.append("128-bit shared-memory loads")
    parts.append("address arithmetic and loop counters out of the k loop (one pointer increment per tile, the "
                 "inner loop fully unrolled, no 64-bit index math per load)")
    if not counts.get("ldgsts"):
        parts.append("fewer instructions between tiles (the global-to-shared copy as cp.async, so no register "
                     "round trip and no STS per element)")
    return "raise the share of issue slots that are FFMAs: " + "; ".join(parts)


def wave_tail(c: CaseDiagnosis) -> dict | None:
    """A partly empty last wave of blocks (``waves`` above 1, the last one less than
    :data:`TAIL_FULL` full): ``{"last_full", "idle"}``, ``idle`` the share of SM time idle in the tail."""
    import math

    if c.waves is None or c.waves <= 1.0:
        return None
    whole = math.ceil(c.waves - 1e-9)
    last = c.waves - (whole - 1)
    if last >= TAIL_FULL:
        return None
    return {"last_full": last, "idle": (whole - c.waves) / whole}
