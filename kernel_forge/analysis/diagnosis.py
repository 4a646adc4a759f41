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
:func:`~.limiter.name_limit` names what limits it -- shared-memory instruction issue, bank conflicts,
global-memory latency, the load/store queue, barriers, the issue slots, another math pipe --
from the warp stalls, the pipe metrics and the instruction mix of its hot loop
(:mod:`kernel_forge.gpu.instruction_mix`), with the advice for it.  :func:`~.directions.directions` turns the
diagnosis into distinct directions for the ``n`` proposals of one iteration, the advice for the
named limit first.  Holdout cases never appear.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from kernel_forge.analysis.case_diagnosis import CaseDiagnosis
from kernel_forge.analysis.diagnosis_text import case_line, us
from kernel_forge.analysis.limiter import PIPE_BUSY_PCT, limit_entry, name_limit, pipe_busy
from kernel_forge.analysis.profile_reading import normalise_case
from kernel_forge.gpu import device_description as dd
from kernel_forge.gpu import instruction_mix as imix
from kernel_forge.model.occupancy import resources_for_case
from kernel_forge.model.task import Task

__all__ = ["CaseDiagnosis", "Diagnosis", "diagnose"]

#: a median at or below this (µs) is launch-sized: fixed costs, not bandwidth or FLOPs, dominate
LAUNCH_SIZED_US = 10.0
#: below this % of both roofs a kernel is "far below" them
FAR_BELOW_PCT = 30.0
#: a grid shorter than this share of one wave of resident blocks leaves SMs idle
SHORT_WAVE = 0.5


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
            line = case_line(c, self.peak)
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
            d.limiter = limit_entry("unnamed", [])
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
