"""Directions for the proposals of one iteration, read from a :class:`~.diagnosis.Diagnosis`:
the advice for each case's named limit first, then the bound's and the grid's, ranked by the
gain each could bring to the score, distinct across the ``n`` proposals."""
from __future__ import annotations

from kernel_forge.analysis.case_diagnosis import CaseDiagnosis
from kernel_forge.analysis.diagnosis import Diagnosis
from kernel_forge.analysis.diagnosis_text import us
from kernel_forge.analysis.limiter import FEW_FFMA_PER_LDS, TAIL_IDLE, wave_tail
from kernel_forge.gpu import instruction_mix as imix

__all__ = ["direction_items", "directions", "headroom", "register_blocked"]

#: occupancy below this is reported as a limit worth fixing
LOW_OCCUPANCY = 0.5
#: a named limit's gain on its case is estimated as the room to the nearer roof, at most this
LIMIT_GAIN_CAP = 2.0


# -- directions -------------------------------------------------------------------------------
_STALL_ADVICE = {
    "long_scoreboard": "warps wait on global memory: keep more loads in flight (prefetch the next tile into "
                       "registers while computing this one, or cp.async double buffering into shared memory)",
    "barrier": "warps wait at __syncthreads: fewer barriers per step (larger steps between them, warp-level "
               "shuffles instead of shared-memory reductions)",
    "mio_throttle": "the shared-memory/MIO queue is full: fewer, wider shared-memory accesses (float4), pad "
                    "arrays to avoid bank conflicts",
    "short_scoreboard": "warps wait on shared memory or special-function results: avoid bank conflicts, reuse "
                        "values loaded from shared memory in registers",
    "math_pipe_throttle": "a math pipe is saturated: fewer instructions per useful FMA (hoist index arithmetic, "
                          "unroll), or balance FMA with other pipes",
    "lg_throttle": "the global load/store queue is full: fewer, wider global accesses (16-byte vectors)",
    "wait": "fixed-latency dependencies dominate: more independent instructions per thread (ILP, unrolling)",
    "branch_resolving": "divergent branches: make the control flow uniform across a warp",
    "no_instruction": "instruction-cache misses: a smaller unrolled body",
    "dispatch_stall": "dispatch stalls: simpler instruction mix",
    "membar": "memory barriers: drop __threadfence where not needed",
    "drain": "the end of the kernel waits for stores to drain: fewer, wider stores",
    "imc_miss": "constant-cache misses: uniform __constant__ accesses across a warp",
    "tex_throttle": "the texture pipe is saturated: plain global loads",
    "sleeping": "warps sleep (nanosleep or a full warp yield): avoid spinning",
}


def headroom(c: CaseDiagnosis) -> float | None:
    """How much faster case ``c`` could be before it meets the nearer roof (100 % / its share of it)."""
    pcts = [p for p in (c.pct_bandwidth, c.pct_compute) if p]
    return 100.0 / max(pcts) if pcts else None


def register_blocked(d: Diagnosis) -> bool:
    """Whether the kernel already keeps a tile of outputs in registers per thread: its hot loop
    issues at least :data:`FEW_FFMA_PER_LDS` FFMA per shared-memory load on some case's setting,
    or, with no mix, some case reaches 50 % of the fp32 FMA peak (no kernel without a register
    tile does).  Then "register blocking" and "fewer registers/accumulators" are never advised."""
    for c in d.cases:
        mix = d.mix_of(c.name)
        r = imix.ratios(mix) if mix and not mix.get("error") else {}
        if r.get("ffma_per_lds", 0.0) >= FEW_FFMA_PER_LDS:
            return True
    fp32 = bool(d.peak and d.peak.get("key") == "fp32")
    return fp32 and any((c.pct_compute or 0.0) >= 50.0 for c in d.cases)


def _score_gain(d: Diagnosis, per_case: dict[str, float]) -> float:
    """The factor on the score (the geometric mean over the performance cases) if each case named
    in ``per_case`` became that many times faster."""
    import math

    n = max(1, len(d.cases))
    return math.exp(sum(math.log(max(1.0, g)) for g in per_case.values()) / n)


def _grid_directions(d: Diagnosis) -> list[tuple[str, str, float]]:
    """The small-grid direction (cases with fewer blocks than SMs) and the wave-tail one, each
    with the gain it could give on the score."""
    out = []
    small = [(c, min(d.sms / c.blocks, headroom(c) or 1.0)) for c in d.cases
             if c.blocks and d.sms and c.blocks < d.sms]
    small = [(c, g) for c, g in small if g > 1.05]
    if small:
        gain = _score_gain(d, {c.name: g for c, g in small})
        names = ", ".join(f"{c.name} ({c.blocks} blocks)" for c, _ in small)
        idle = ", ".join(f"{c.name} {100 * (1 - c.blocks / d.sms):.0f}%" for c, _ in small)
        out.append(("grid:small", f"too few blocks: {names} on {d.sms} SMs leave SMs idle ({idle} of them) — "
                    "give these sizes more blocks: split the reduction dimension (split-K: 2-8 blocks per output "
                    "tile, each summing a slice of k, the partial tiles added in a fixed order by the last block to "
                    "finish or a second pass, so results stay bit-identical), smaller tiles (e.g. 32x32 or 16x64) "
                    "for small sizes through a `// kforge: dispatch` line, or a stream-K schedule; the large "
                    f"sizes keep their tiles. Worth up to x{gain:.2f} on the score", gain))
    for c in d.cases:
        tail = wave_tail(c)
        h = headroom(c)
        if tail is None or tail["idle"] < TAIL_IDLE:
            continue
        g = min(1.0 / (1.0 - tail["idle"]), h or 1.0)
        gain = _score_gain(d, {c.name: g})
        per = (c.resources or {}).get("blocks_per_sm")
        out.append((f"grid:tail:{c.name}", f"wave quantisation on case {c.name}: {c.blocks} blocks"
                    + (f" at {per} per SM" if per else "") + f" are {c.waves:.2f} waves on {d.sms} SMs, the last "
                    f"{100 * tail['last_full']:.0f}% full (about {100 * tail['idle']:.0f}% of the time idle) — a tile "
                    "count that fills whole waves, 2 resident blocks per SM, or a persistent stream-K loop over the "
                    f"tiles. Worth up to x{gain:.2f} on the score", gain))
    return out


def _bound_directions(bound: str, d: Diagnosis, worst: CaseDiagnosis | None) -> list[tuple[str, str]]:
    pct_bw = max((c.pct_bandwidth or 0.0) for c in d.cases) if d.cases else 0.0
    if bound == "memory":
        out = []
        if pct_bw < 70:
            out.append(("mem:coalesce", "memory-bound below the bandwidth roof: make every warp's accesses "
                        "coalesced and wide (16-byte float4/uint4 loads and stores where aligned, a scalar tail), "
                        "and keep enough bytes in flight per SM (several independent loads per thread)"))
        out.append(("mem:bytes", f"memory-bound at {pct_bw:.0f}% of bandwidth at best: move fewer bytes — read "
                    "each input once (one pass instead of several, keep a row or tile in registers or shared "
                    "memory), write each output once, no redundant re-reads"))
        out.append(("mem:inflight", "memory-bound: raise the bytes in flight — grid-stride loops with unrolled "
                    "independent loads, or more resident warps per SM"))
        return out
    blocked = register_blocked(d)
    if bound == "pipe" and blocked:
        return [("pipe:overlap", "below the FMA roof with a register tile already: overlap loads with math — "
                 "multi-stage shared tiles filled by cp.async (global loads for step k+1 in flight while step k is "
                 "multiplied), fragments of k+1 read before the FMAs of k")]
    if bound == "compute" and blocked:
        return [("cmp:issue", "compute-bound with a register tile already: what is left is issue efficiency — "
                 "more FFMA per issued instruction (a larger per-thread tile where registers allow, index math and "
                 "loop overhead out of the k loop) and no idle SMs (whole waves)")]
    if bound == "pipe":
        return [("pipe:regblock", "below the FMA roof with a high FLOP/byte: register blocking — each thread "
                 "computes a small tile of outputs (e.g. 8x8) from operands staged in shared memory and read as "
                 "128-bit vectors, so every loaded value feeds several FMAs"),
                ("pipe:overlap", "below the FMA roof: overlap loads with math — double-buffered shared tiles "
                 "(global loads for step k+1 in flight while step k is multiplied), fragments of k+1 read before "
                 "the FMAs of k")]
    if bound == "compute":
        out = [("cmp:regblock", "compute-bound: register blocking — each thread computes a small tile of outputs "
                "(e.g. 4x4 or 8x8) from operands staged in shared memory, so every loaded value feeds several "
                "FMAs"),
               ("cmp:ilp", "compute-bound: more instruction-level parallelism — several independent "
                "accumulators per thread, unrolled inner loops, index arithmetic hoisted out of the loop")]
        if d.peak and d.peak.get("key") == "tensor16":
            out.insert(0, ("cmp:tensor", "compute-bound on 16-bit operands: use tensor cores (mma.sync / wmma "
                           "fragments) with fp32 accumulation"))
        return out
    if bound == "latency" and any(c.blocks and d.sms and c.blocks < d.sms for c in d.cases):
        return [("lat:serial", "latency-bound: shorten each thread's serial chain — fewer dependent steps per "
                 "thread, all independent loads issued before they are used")]
    if bound == "latency":
        where = f" on case {worst.name} ({worst.bound_why})" if worst is not None and worst.bound == "latency" else ""
        return [("lat:parallel", f"latency-bound{where}: expose more parallelism — more, smaller blocks or "
                 "work split across more threads (e.g. split the reduction or k dimension), so every SM has "
                 "several warps to switch between"),
                ("lat:serial", "latency-bound: shorten each thread's serial chain — fewer dependent steps per "
                 "thread, warp shuffles for reductions, all independent loads issued before they are used")]
    return [("gen:measure", "restructure the kernel around its data movement: stage reused data in shared "
             "memory and registers, coalesce global accesses")]


#: the stalls whose advice a named limit already gives
_LIMIT_STALLS = {"global_latency": ("long_scoreboard",), "lsu_queue": ("lg_throttle",), "barrier": ("barrier",),
                 "shared_issue": ("mio_throttle",), "shared_conflicts": ("mio_throttle", "short_scoreboard"),
                 "mio_issue": ("mio_throttle",), "mufu_issue": ("mio_throttle",), "shfl_issue": ("mio_throttle",),
                 "shared_latency": ("short_scoreboard",), "dependency": ("wait",),
                 "math_other": ("math_pipe_throttle",)}


def _interleave(groups: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    out, seen = [], set()
    depth = max((len(g) for g in groups), default=0)
    for i in range(depth):
        for g in groups:
            if i < len(g) and g[i][0] not in seen:
                seen.add(g[i][0])
                out.append(g[i])
    return out


def _item_gain(d: Diagnosis, key: str) -> float | None:
    """The factor a direction could give on the score, where it can be estimated: a case's named
    limit up to its room to the roof (at most :data:`LIMIT_GAIN_CAP`), a case slower than a
    reference up to the reference's time."""
    if key.startswith("limit:"):
        # fixing a case's limit is how it reaches a faster reference: up to that, else up to the cap
        cases = [c for c in d.cases if c.limiter and f"limit:{c.limiter['key']}" == key]
        reach = {c.name: max([LIMIT_GAIN_CAP] + [1.0 / s["ratio"] for s in d.slower if s["case"] == c.name])
                 for c in cases}
        return _score_gain(d, {c.name: min(headroom(c) or 1.0, reach[c.name]) for c in cases}) if cases else None
    if key.startswith("focus:"):
        name = key.split(":", 1)[1]
        worst = min((s["ratio"] for s in d.slower if s["case"] == name), default=None)
        return _score_gain(d, {name: 1.0 / worst}) if worst else None
    return None


def _rank(d: Diagnosis, pool: list[tuple[str, str]], grid: list[tuple[str, str, float]]) -> list[tuple[str, str]]:
    """Directions ranked by the gain they could give on the score (estimated ones first, the
    largest first), the rest after them in the diagnosis order; each estimate is said."""
    scored = [(k, t, g) for k, t, g in grid]
    for k, t in pool:
        g = _item_gain(d, k)
        scored.append((k, t + (f". Worth up to x{g:.2f} on the score" if g and g > 1.005 else ""), g))
    order = {k: i for i, (k, _, _) in enumerate(scored)}
    known = sorted((x for x in scored if x[2] and x[2] > 1.005), key=lambda x: (-x[2], order[x[0]]))
    rest = [x for x in scored if not (x[2] and x[2] > 1.005)]
    return [(k, t) for k, t, _ in known + rest]


def directions(diagnosis: Diagnosis, n: int) -> list[str]:
    """``n`` distinct, concrete directions for the proposals of one iteration, drawn from the
    diagnosis (slowest case against the baselines first, then spills, occupancy, the bound, the
    profiler's top stalls, then generic ones); the same diagnosis always gives the same list."""
    return [text for _, text in direction_items(diagnosis, n)]


def direction_items(diagnosis: Diagnosis, n: int) -> list[tuple[str, str]]:
    """:func:`directions` with each one's technique key (``"focus:large"``, ``"cmp:regblock"``,
    ``"stall:mio_throttle"`` ...; a repeat gets ``"#N"`` appended): the search strategies keep
    their population diverse by these keys and the attempt ledger groups by them."""
    d = diagnosis
    groups: list[list[tuple[str, str]]] = []
    # 0. the named limit of each case, the case furthest behind a reference first
    def behind(c: CaseDiagnosis) -> tuple:
        return (min([*c.vs_baselines.values(), c.vs_initial or 9e9]), c.name)
    limits = []
    named = sorted((c for c in d.cases if c.limiter and c.limiter["key"] != "unnamed"), key=behind)
    for c in named:
        lim = c.limiter
        also = [x.name for x in named if x is not c and x.limiter["key"] == lim["key"]]
        limits.append((f"limit:{lim['key']}", f"the limit on case {c.name} is {lim['what']} ({lim['evidence']})"
                       + (f", and on {', '.join(also)} too" if also else "") + f": {lim['advice']}"))
    groups.append(limits)
    # 1. the cases where a reference is faster, worst first
    focus = []
    for s in sorted(d.slower, key=lambda s: (s["ratio"], s["case"], s["than"])):
        c = d.case(s["case"])
        size = ", ".join(f"{k}={v}" for k, v in (c.vars if c else {}).items())
        what = ""
        if c is not None:
            what = (f" it is limited there by {c.limiter['what']}" if c.bound == "pipe" and c.limiter
                    else f" it is {c.bound}-bound there ({c.bound_why})")
        focus.append((f"focus:{s['case']}", f"focus on case {s['case']}" + (f" ({size})" if size else "")
                      + f": {us(s['us'])} µs against {s['than']}'s {us(s['other_us'])} µs (x{s['ratio']:.2f});"
                      + what + " — make that size fast without slowing the others (a size-dependent "
                      "launch or tile choice through the kforge header is fine)"))
    groups.append(focus)
    # 2. resources
    res = []
    spilling = [c for c in d.cases if c.resources and ((c.resources.get("spill_stores") or 0)
                                                        + (c.resources.get("spill_loads") or 0)) > 0]
    if spilling:
        r = spilling[0].resources
        res.append(("spills", f"cut register pressure: ptxas spills {r.get('spill_stores', 0)} B stores / "
                    f"{r.get('spill_loads', 0)} B loads at {r.get('registers')} registers per thread — a smaller "
                    "per-thread tile, fewer live values, or __launch_bounds__ that matches the block size"))
    blocked = register_blocked(d)
    low = sorted((c for c in d.cases if c.resources and c.resources.get("occupancy") is not None
                  and c.resources["occupancy"] < LOW_OCCUPANCY
                  # a register tile's registers are what it is for: never "fewer accumulators" for it
                  and not (blocked and c.resources.get("occupancy_limiter") == "registers")),
                 key=lambda c: (c.resources["occupancy"], c.name))
    if low:
        c = low[0]
        r = c.resources
        lim = r.get("occupancy_limiter", "?")
        fix = {"registers": f"fewer registers per thread (now {r.get('registers')}; __launch_bounds__, fewer "
                            "accumulators) or fewer threads holding them",
               "shared_memory": f"less shared memory per block (now {r.get('static_smem', 0) + r.get('dynamic_smem', 0)} B: "
                                "smaller tiles or fewer stages) so more blocks fit",
               "threads": f"a block size whose warps fill the SM better (now {r.get('threads_per_block')} "
                          "threads per block)",
               "blocks": f"larger blocks: the SM holds at most {r.get('blocks_per_sm')} blocks and they are small "
                         f"({r.get('threads_per_block')} threads)"}.get(lim, "the limiting resource")
        res.append((f"occupancy:{lim}", f"raise the theoretical occupancy on case {c.name} ({100 * r['occupancy']:.0f}%, "
                    f"limited by {lim}): {fix}"))
    groups.append(res)
    # 3. the bound of most cases (the worst case's first)
    worst = min(d.cases, key=lambda c: (min([*c.vs_baselines.values(), c.vs_initial or 9e9]), c.name)) if d.cases else None
    bounds = [d.dominant_bound()]
    if worst is not None and worst.bound not in bounds:
        bounds.insert(0, worst.bound)
    for b in bounds:
        groups.append(_bound_directions(b, d, worst))
    # 4. the profiler's top stalls
    stalls: dict[str, float] = {}
    for c in d.cases:
        for s in (c.profile or {}).get("stalls") or []:
            stalls[s["reason"]] = max(stalls.get(s["reason"], 0.0), s.get("share") or 0.0)
    ranked = [c for c in d.cases if c.profile and c.profile.get("stalls")]
    first = [s["reason"] for s in ranked[0].profile["stalls"]] if ranked else []
    order = sorted(stalls, key=lambda k: (-stalls[k], first.index(k) if k in first else 99, k))
    named = {r for c in d.cases if c.limiter for r in _LIMIT_STALLS.get(c.limiter["key"], ())}
    order = [k for k in order if k not in named]
    prof = [(f"stall:{k}", f"the profiler's top warp stall is {k}"
             + (f" ({100 * stalls[k]:.0f}% of stalled warps)" if stalls[k] else "") + f": {_STALL_ADVICE[k]}")
            for k in order if k in _STALL_ADVICE and (stalls[k] >= 0.1 or not stalls[k])][:2]
    groups.append(prof)
    # 5. generic
    groups.append([("gen:tune", "tune the current best: declare its block size and tile sizes as tunables "
                    "(`// kforge: tune NAME = [...]`) so the harness tries several settings"),
                   ("gen:rewrite", "try a different algorithmic structure than the current best (a different "
                    "work decomposition per block/warp/thread), not a small edit of it"),
                   ("gen:instr", "reduce the instruction count per output: hoist index arithmetic, "
                    "#pragma unroll the inner loops, use fused multiply-add and precomputed reciprocals")])
    pool = _rank(d, _interleave(groups), _grid_directions(d))
    out = pool[:n]
    k = 1
    while len(out) < n:
        key, text = pool[(k - 1) % len(pool)]
        out.append((f"{key}#{k + 1}", f"{text} (variant {k + 1}: choose a design the other proposals of this "
                    "iteration are unlikely to pick)"))
        k += 1
    return out
