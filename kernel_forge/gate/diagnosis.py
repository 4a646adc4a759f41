"""What limits the current best kernel, per performance case.

:func:`diagnose` reads an attempt's evaluation (``Evaluation.to_json()``), the initial kernel's and
the vendor baselines', the device description and its calibration, and an optional profile
(:meth:`GateLike.profile`), and returns a :class:`Diagnosis` that the prompt, ``summary.json`` and
``report.md`` all show.  Per case it gives the time, the share of the measured bandwidth and of
the compute peak that applies to the task's operands (:func:`device_description.compute_peak`),
the arithmetic intensity of the task's cost model against the ridge point and the bound it
implies, the baselines' and the initial kernel's times, the kernel's resources and the
*theoretical* occupancy they allow, and the profiler's lines where there is a profile (the
*achieved* occupancy among them: the two are always named apart).

"Compute-bound" is said only where the pipe that does the task's arithmetic is busy: the FMA
pipe (or the tensor pipe for 16-bit matrix work and for a TF32 tensor-core kernel of fp32 work) by ncu's ``sm__pipe_*_cycles_active``, or, where
that was not measured, by the useful FLOP rate against the peak.  A kernel whose intensity lies
above the ridge point but whose arithmetic pipe is not busy is ``pipe``-bound, and
:func:`name_limit` names what limits it -- shared-memory instruction issue, bank conflicts,
global-memory latency, the load/store queue, barriers, the issue slots, another math pipe --
from the warp stalls, the pipe metrics and the instruction mix of its hot loop
(:mod:`kernel_forge.gpu.instruction_mix`), with the advice for it.  :func:`directions` turns the
diagnosis into distinct directions for the ``n`` proposals of one iteration, the advice for the
named limit first.  Holdout cases never appear.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from kernel_forge.gpu import device_description as dd
from kernel_forge.gpu import instruction_mix as imix
from kernel_forge.model.occupancy import resources_for_case
from kernel_forge.gate.profiler import normalise_case, stall_text
from kernel_forge.model.task import Task

#: a median at or below this (µs) is launch-sized: fixed costs, not bandwidth or FLOPs, dominate
LAUNCH_SIZED_US = 10.0
#: below this % of both roofs a kernel is "far below" them
FAR_BELOW_PCT = 30.0
#: a grid shorter than this share of one wave of resident blocks leaves SMs idle
SHORT_WAVE = 0.5
#: occupancy below this is reported as a limit worth fixing
LOW_OCCUPANCY = 0.5
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
#: a named limit's gain on its case is estimated as the room to the nearer roof, at most this
LIMIT_GAIN_CAP = 2.0


@dataclass
class CaseDiagnosis:
    name: str
    median_us: float
    pct_bandwidth: float | None = None        #: % of the measured copy bandwidth
    pct_compute: float | None = None          #: % of the compute peak that applies to the task
    bound: str = "unknown"                    #: "memory" | "compute" | "pipe" | "latency" | "unknown"
    vs_initial: float | None = None           #: initial median / this median (>1: faster)
    vs_baselines: dict = field(default_factory=dict)   #: baseline name -> baseline median / this median
    vars: dict = field(default_factory=dict)  #: the case's variables (sizes)
    p10_us: float | None = None
    p90_us: float | None = None
    initial_us: float | None = None           #: the initial kernel's median on this case
    baseline_us: dict = field(default_factory=dict)    #: baseline name -> its median (µs)
    gbps: float | None = None                 #: cost-model bytes / median
    tflops: float | None = None               #: cost-model FLOPs / median
    intensity: float | None = None            #: cost-model FLOPs per byte
    bound_why: str = ""                       #: the numbers behind ``bound``, one phrase
    launch: dict | None = None                #: resolved grid, block, shared_mem
    blocks: int | None = None                 #: blocks in the grid
    waves: float | None = None                #: blocks / (resident blocks per SM x SMs)
    resources: dict | None = None            #: CaseResult.resources (registers ... occupancy_limiter)
    resources_source: str = ""               #: "driver" (the worker's cuOccupancy...) | "computed" (ptxas + launch)
    profile: dict | None = None               #: this case's profiler summary (profile.summarise_row)
    #: how busy the task's arithmetic pipe is: {"pct", "pipe" ("FMA" | "tensor"), "source" (what measured it)}
    pipe_busy: dict | None = None
    #: what limits the kernel here, where it can be named: {"key", "what", "evidence", "advice"}
    limiter: dict | None = None


@dataclass
class Diagnosis:
    cases: list[CaseDiagnosis] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    peak: dict | None = None                  #: {"key", "label", "flops", "unit"}: the ceiling that applies
    tensor_note: str = ""                     #: whether tensor cores apply to this task
    bandwidth: float | None = None            #: bytes/s used for the roofline
    bandwidth_source: str = ""                #: "measured copy bandwidth" | "theoretical ..."
    ridge: float | None = None                #: peak / bandwidth (FLOP per byte)
    sms: int | None = None
    profile_status: dict | None = None        #: {"available", "reason", "tool", "seconds"} of the profile given
    #: every case where the kernel is slower than a baseline or the initial kernel:
    #: {"case", "than", "ratio" (other median / this median, < 1), "us", "other_us"}
    slower: list[dict] = field(default_factory=list)
    #: the kernel's instruction mix (instruction_mix.InstructionMix.to_json(), or {"error"}), None: not known
    instruction_mix: dict | None = None
    #: under a dispatch rule: case -> the mix of the setting that case runs with
    instruction_mixes: dict = field(default_factory=dict)
    #: ncu metrics asked for but not measured on this GPU
    metrics_missing: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def case(self, name: str) -> CaseDiagnosis | None:
        return next((c for c in self.cases if c.name == name), None)

    def dominant_bound(self) -> str:
        counts: dict[str, int] = {}
        for c in self.cases:
            counts[c.bound] = counts.get(c.bound, 0) + 1
        if not counts:
            return "unknown"
        order = ("latency", "memory", "pipe", "compute", "unknown")
        return max(order, key=lambda b: (counts.get(b, 0), -order.index(b)))

    def slower_line(self) -> str:
        """``large x0.55 vs cublas; ...`` or an empty string."""
        return "; ".join(f"{s['case']} x{s['ratio']:.2f} vs {s['than']} ({us(s['us'])} vs {us(s['other_us'])} µs)"
                         for s in self.slower)

    def render(self) -> str:
        """The diagnosis as the prompt shows it."""
        if not self.cases:
            return "\n".join(["(no timed performance case yet)"] + [f"- {n}" for n in self.notes])
        head = []
        if self.peak and self.bandwidth:
            head.append(f"Roofline: {self.peak['label']} {self.peak['flops'] / 1e12:.1f} {self.peak['unit']}, "
                        f"{self.bandwidth_source} {self.bandwidth / 1e9:.0f} GB/s, ridge point {self.ridge:.1f} FLOP/byte.")
        lines, said = list(head), {}
        for c in self.cases:               # a resources line the case before had word for word is named, not repeated
            line = _case_line(c, self.peak)
            main, nl, rest = line.partition("\n  resources (")
            res = "  resources (" + rest.split("\n", 1)[0] if nl else None
            if res is not None and res in said:
                line = line.replace(res, f"  resources: as for {said[res]}", 1)
            elif res is not None:
                said[res] = c.name
            lines.append(line)
        lines += self._mix_lines()
        if self.metrics_missing:
            lines.append("Not measured on this GPU (ncu has no such metric): " + ", ".join(self.metrics_missing))
        if self.slower:
            lines.append("Slower than a reference on: " + self.slower_line())
        if self.profile_status is not None:
            ps = self.profile_status
            if ps.get("available"):
                lines.append(f"(profile: {ps.get('tool', 'ncu')}, {ps.get('seconds', 0):.1f} s; DRAM, L2 and SM are % of "
                             "peak over the elapsed time, the pipes and issue slots % of the SM's active cycles)")
            else:
                lines.append(f"No profiler metrics: {ps.get('reason') or 'not available'}; the harness's own figures "
                             "above (times, roofline, resources, occupancy) stand in.")
        lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)

    def mix_of(self, case: str) -> dict | None:
        """The instruction mix of the setting ``case`` runs with."""
        return self.instruction_mixes.get(case) or self.instruction_mix

    def _mix_lines(self) -> list[str]:
        """The instruction mix, once per distinct setting: under a dispatch rule, the cases each
        setting runs named."""
        groups: list[tuple[dict, list[str]]] = []
        for c in self.cases:
            mix = self.mix_of(c.name)
            if not mix:
                continue
            g = next((g for g in groups if g[0] is mix or g[0] == mix), None)
            if g is None:
                groups.append((mix, [c.name]))
            else:
                g[1].append(c.name)
        out = []
        for mix, names in groups:
            where = "this kernel" if len(groups) == 1 else f"the setting of {', '.join(names)}"
            if mix.get("error"):
                out.append(f"(no instruction mix of {where}: {mix['error']})")
            else:
                out.append(f"Instruction mix of {where}: " + imix.render(mix).removeprefix("instruction mix "))
        return out

    def render_markdown(self) -> str:
        """A table for report.md."""
        if not self.cases:
            return "(no timed performance case)"
        bases = sorted({b for c in self.cases for b in c.vs_baselines})
        head = (["case", "median µs", "bound", "FLOP/B", "% bw", "% peak", "x initial"] + [f"x {b}" for b in bases]
                + ["regs", "spills B", "smem B (static+dyn)", "occupancy", "ncu DRAM/L2/SM %", "FMA pipe %", "top stall"])
        rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
        for c in self.cases:
            r = c.resources or {}
            p = c.profile or {}
            occ = (f"{r['occupancy'] * 100:.0f}% theoretical ({r.get('occupancy_limiter', '?')}, {c.resources_source})"
                   if r.get("occupancy") is not None else "-")
            if p and p.get("achieved_occupancy_pct") is not None:
                occ += f"; {p['achieved_occupancy_pct']:.0f}% achieved"
            ncu = (f"{f(p.get('dram_pct'), '.0f')}/{f(p.get('l2_pct'), '.0f')}/{f(p.get('sm_pct'), '.0f')}"
                   if p else "-")
            stall = (p.get("stalls") or [{}])[0].get("reason", "-") if p else "-"
            bound = c.bound + (f": {c.limiter['what']}" if c.limiter else "")
            cells = [c.name, us(c.median_us), bound, f(c.intensity, ".1f"), f(c.pct_bandwidth, ".1f"),
                     f(c.pct_compute, ".1f"), f(c.vs_initial, ".2f")] + [f(c.vs_baselines.get(b), ".2f") for b in bases]
            spills = (r.get("spill_stores") or 0) + (r.get("spill_loads") or 0) if r else None
            smem = f"{r.get('static_smem', 0)}+{r.get('dynamic_smem', 0)}" if r else "-"
            pipe = f"{c.pipe_busy['pct']:.0f} ({c.pipe_busy['source']})" if c.pipe_busy else "-"
            cells += [f(r.get("registers"), "d"), f(spills, "d"), smem, occ, ncu, pipe, stall]
            rows.append("| " + " | ".join(cells) + " |")
        return "\n".join(rows)


def us(x: float) -> str:
    """A time in µs with the digits that matter."""
    return f"{x:.2f}" if x < 100 else f"{x:.1f}" if x < 10000 else f"{x:.0f}"


def _case_line(c: CaseDiagnosis, peak: dict | None) -> str:
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


def _timed(ev: dict | None) -> dict[str, dict]:
    return {c["name"]: c for c in (ev or {}).get("cases", []) if c.get("timing") and c.get("role") == "performance"}


def _classify(d: CaseDiagnosis, ridge: float | None, sms: int | None) -> tuple[str, str]:
    pcts = [p for p in (d.pct_bandwidth, d.pct_compute) if p is not None]
    top = max(pcts) if pcts else None
    far = top is not None and top < FAR_BELOW_PCT
    if far and d.blocks is not None and sms and d.blocks < sms:
        return "latency", f"only {d.blocks} blocks for {sms} SMs"
    if far and d.waves is not None and d.waves < SHORT_WAVE:
        return "latency", f"the grid fills {d.waves:.2f} of one wave of resident blocks"
    if far and d.median_us <= LAUNCH_SIZED_US:
        return "latency", f"a launch-sized {d.median_us:.1f} µs, at {top:.0f}% of the nearer roof"
    if d.intensity is not None and ridge:
        if d.intensity < ridge:
            return "memory", f"{d.intensity:.1f} FLOP/byte < ridge {ridge:.1f}"
        return _compute_or_pipe(d, f"{d.intensity:.1f} FLOP/byte >= ridge {ridge:.1f}")
    if d.pct_bandwidth is not None:
        return "memory", "the cost model counts bytes only"
    if d.pct_compute is not None:
        return _compute_or_pipe(d, "the cost model counts FLOPs only")
    return "unknown", "no cost model"


def _compute_or_pipe(d: CaseDiagnosis, why: str) -> tuple[str, str]:
    """"compute" only where the arithmetic pipe is busy; else "pipe" (something else limits it)."""
    b = d.pipe_busy
    if b is None:
        return "compute", why
    if b["pct"] >= PIPE_BUSY_PCT:
        return "compute", f"{why}; the {b['pipe']} pipe {b['pct']:.0f}% busy ({b['source']})"
    return "pipe", why


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


def _limit(key: str, evidence: list[str]) -> dict:
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
        cands.append((cf / wf + mio, _limit("shared_conflicts", [
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
        cands.append((max(mt, ss, (mio_pct or 0) / 100), _limit(key, why + [extra, busy_txt])))
    elif ss >= 0.25:
        cands.append((ss, _limit("shared_latency", [_stall_desc(stalls, "short_scoreboard"),
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
            cands.append((v, _limit(key, [_stall_desc(stalls, reason), extra, busy_txt])))
    mp = _share(stalls, "math_pipe_throttle")
    if mp >= STALL_NAMES_LIMIT and not (busy and busy["pct"] >= PIPE_BUSY_PCT):
        cands.append((mp, _limit("math_other", [_stall_desc(stalls, "math_pipe_throttle"),
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
            lim = _limit("issue_slots", [
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
        return _limit("shared_issue", [lds_txt + " (no profiler stalls)", busy_txt])
    if c.bound == "pipe":
        return _limit("unnamed", [busy_txt])
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


def _resources(case: dict, ev: dict, device: dict | None) -> tuple[dict | None, str]:
    if case.get("resources"):
        r = dict(case["resources"])
        return r, r.pop("source", "driver")
    r = resources_for_case(ev.get("compile"), case.get("launch"), device)
    return (r, "computed") if r else (None, "")


def diagnose(task: Task, best: dict, *, initial: dict | None = None, baselines: dict[str, dict] | None = None,
             device: dict | None = None, calibration: dict | None = None, profile: dict | None = None,
             mix: dict | None = None, source: str | None = None) -> Diagnosis:
    """The diagnosis of ``best`` (an Evaluation JSON); ``initial`` and ``baselines`` are
    evaluations of the initial kernel and the vendor baselines, ``profile`` a
    :meth:`GateLike.profile` answer for ``best``, ``mix`` its instruction mix
    (:func:`kernel_forge.gpu.instruction_mix.mix_for_candidate`; default: the profile's),
    ``source`` its kernel (a TF32 tensor-core kernel of a float32 task gets that pipe's ceiling)."""
    device = dd.complete(device)
    out = Diagnosis()
    bw, out.bandwidth_source = dd.bandwidth(calibration, device)
    out.bandwidth = bw
    peak = None
    if device:
        p, out.tensor_note = dd.compute_peak(task, device, calibration, source)
        if p.flops:
            peak = p
            out.peak = {"key": p.key, "label": p.label, "flops": p.flops, "unit": p.unit}
        out.sms = device.get("sms")
    if peak and bw:
        out.ridge = peak.flops / bw
    if profile is not None:
        out.profile_status = {k: profile.get(k) for k in ("available", "reason", "tool", "seconds")}
        out.metrics_missing = list(profile.get("metrics_missing") or [])
    out.instruction_mix = mix if mix is not None else (profile or {}).get("instruction_mix")
    if mix is None:
        out.instruction_mixes = dict((profile or {}).get("instruction_mixes") or {})
    prof_cases = (profile or {}).get("cases") or {}
    init = _timed(initial)
    bases = {k: _timed(v) for k, v in (baselines or {}).items()}
    shown = {c.name: c for c in task.cases if c.role == "performance"}
    for name, c in _timed(best).items():
        if name not in shown:
            continue
        t = c["timing"]
        med = t["median"]
        if not med or med <= 0:
            out.notes.append(f"case {name}: no positive median time")
            continue
        d = CaseDiagnosis(name=name, median_us=med, vars=dict(shown[name].vars), p10_us=t.get("p10"), p90_us=t.get("p90"))
        flops, nbytes = task.cost(shown[name])
        secs = med * 1e-6
        if nbytes and secs > 0:
            d.gbps = nbytes / secs / 1e9
            if bw:
                d.pct_bandwidth = 100.0 * nbytes / secs / bw
        if flops and secs > 0:
            d.tflops = flops / secs / 1e12
            if peak:
                d.pct_compute = 100.0 * flops / secs / peak.flops
        if flops and nbytes:
            d.intensity = flops / nbytes
        d.launch = c.get("launch")
        if d.launch and d.launch.get("grid"):
            d.blocks = 1
            for g in d.launch["grid"]:
                d.blocks *= int(g)
        d.resources, d.resources_source = _resources(c, best, device)
        if d.resources and d.resources.get("blocks_per_sm") and d.blocks and out.sms:
            d.waves = d.blocks / (d.resources["blocks_per_sm"] * out.sms)
        if name in init and init[name]["timing"]["median"] > 0:
            d.initial_us = init[name]["timing"]["median"]
            d.vs_initial = d.initial_us / med
        for b, cases in bases.items():
            if name in cases and cases[name]["timing"]["median"] > 0:
                d.baseline_us[b] = cases[name]["timing"]["median"]
                d.vs_baselines[b] = d.baseline_us[b] / med
        d.profile = normalise_case(prof_cases.get(name))
        d.pipe_busy = pipe_busy(out.peak["key"] if out.peak else None, d.pct_compute, d.profile)
        d.bound, d.bound_why = _classify(d, out.ridge, out.sms)
        d.limiter = name_limit(d, out.mix_of(name))
        if d.bound == "pipe" and d.limiter is None:
            d.limiter = _limit("unnamed", [])
        out.cases.append(d)
        for b, r in d.vs_baselines.items():
            if r < 1.0:
                out.slower.append({"case": name, "than": b, "ratio": r, "us": med, "other_us": d.baseline_us[b]})
        if d.vs_initial is not None and d.vs_initial < 1.0:
            out.slower.append({"case": name, "than": "initial", "ratio": d.vs_initial, "us": med,
                               "other_us": d.initial_us})
    if not bw:
        out.notes.append("bandwidth unknown: no % of bandwidth and no ridge point")
    if device is None:
        out.notes.append("device unknown: no compute peak, occupancy or ridge point")
    return out


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
