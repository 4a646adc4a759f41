"""Build the proposer's prompt from files and the loop's records (never holdout cases).

The system prompt is ``prompts/system.md`` (the harness's rules and what ``// kforge:`` lines
mean).  The user prompt is two parts (:func:`build_prompt_parts`), the most stable first so that a
provider's prompt cache holds as much as possible:

* a **static prefix**, the same for every call of a run: the task, the device
  (:func:`kernel_forge.gpu.device_description.render`: limits, peaks, the ceiling that applies, how
  candidates are built and timed) and what a strong model needs to know of its architecture
  (:func:`arch_section`), the reference, the expert pattern of the task's kind and the archive's
  kernels (fixed at the run's start);
* a **dynamic rest**: first what every proposal of the iteration shares -- the current best with
  its diagnosis (:mod:`kernel_forge.analysis.diagnosis`), resources and source; earlier correct
  kernels (deduplicated, bounded, none twice as slow as the best, not the initial kernel once
  something beats it, an expert pattern's copy named instead of repeated); recent failures;
  the attempt ledger -- and last what is this proposal's own: the kernel it starts from (its
  edits apply to exactly that kernel), a failed attempt to fix or two parents to combine,
  hints, its direction and the job.

:func:`build_prompt_parts` takes one :class:`PromptContext`.  How a kernel is shown is
:mod:`~kernel_forge.search.prompt_blocks`'s (with the limits on each kind of source), the
failures and a fix turn :mod:`~kernel_forge.search.prompt_failures`'.  Holdout cases, their sizes
and their results never appear.  :func:`write_prompt` writes what a model was asked to
``prompt-NNN.md`` in the run folder.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_forge.gpu import device_description
from kernel_forge.model.clip import clip_kernel, clip_source
from kernel_forge.model.limits import target_arch
from kernel_forge.model.task import Task
from kernel_forge.search.prompt_blocks import (HISTORY_CHARS, HISTORY_KERNEL_CHARS, MAX_SOURCE_CHARS, PATTERN_CHARS,
                                               REFERENCE_CHARS, RETRIEVED_CHARS, PromptAttempt, defines_text, fence,
                                               field_of, normalise, pattern_refs, per_case, shown_cases,
                                               source_block, us)
from kernel_forge.search.prompt_failures import failures_section, fix_section, launch_line

if TYPE_CHECKING:
    from kernel_forge.analysis.diagnosis import Diagnosis


@dataclass
class PromptContext:
    """Everything one proposal's prompt is built from (:func:`build_prompt_parts`).  The run's and
    the iteration's part is shared by every proposal of an iteration; the proposal's own part
    (``fix``, ``start``, ``crossover``, ``direction``) is set per proposal with
    :func:`dataclasses.replace`."""

    task: Task
    reference_source: str
    device: dict | None
    calibration: dict | None
    best: PromptAttempt                                       #: the current best
    history: list[PromptAttempt] = field(default_factory=list)    #: earlier correct kernels
    failures: list[PromptAttempt] = field(default_factory=list)   #: recent failures
    hints: str = ""
    n_history: int = 5                                        #: earlier kernels shown at most
    diagnosis: Diagnosis | None = None                         #: the best's
    #: archive examples and the expert pattern (:class:`kernel_forge.search.retrieval.Example`, or
    #: any object or dict with ``task_name``, ``source`` and ``score_us``)
    retrieved: tuple = ()
    ledger: str = ""                                          #: the attempt ledger's section
    #: the gated attempt of the task's kind's pattern bound to its signature (:mod:`kernel_forge.search.bound`)
    bound: PromptAttempt | None = None
    # -- this proposal's own --------------------------------------------------------------------
    fix: PromptAttempt | None = None                          #: a failed attempt to repair
    #: the kernel it starts from when not the best (:func:`kernel_forge.search.reflection.start_section`)
    start: str = ""
    crossover: tuple[PromptAttempt, PromptAttempt] | None = None   #: two parents to combine
    direction: str = ""


def system_prompt() -> str:
    return resources.files("kernel_forge").joinpath("prompts/system.md").read_text()



# -- static prefix ----------------------------------------------------------------------------
def _task_section(task: Task) -> str:
    lines = [f"# Task: {task.name}", task.description or "", "", "Entry point:", "```cuda",
             task.signature.text, "```", "", "Arguments:"]
    for a in task.args:
        if a.is_buffer:
            kind = "output" if a.output and not a.in_out else ("in/out (reset before each launch)"
                                                               if a.in_out else "input")
            lines.append(f"- `{a.param.text}`: {a.shape_text()}, {kind}")
        else:
            lines.append(f"- `{a.param.text}` = {a.value}")
    if task.launch is not None:
        dims = lambda t: "[" + ", ".join(str(x) for x in t) + "]"  # noqa: E731
        lines.append(f"\nDefault launch: grid {dims(task.launch.grid)}, block {dims(task.launch.block)}, "
                     f"dynamic shared memory {task.launch.shared_mem}")
    tol = task.tolerance
    lines.append(f"Tolerance: |out - ref| <= {tol.atol} + {tol.rtol} * |ref| elementwise"
                 + ("; float atomics allowed (outputs may differ slightly between launches)"
                    if task.nondeterministic else "; repeated launches must be bit-identical"))
    shown = [c for c in task.cases if c.role != "holdout"]
    lines.append("\nCases you are shown (there are also hidden cases of other sizes):")
    for c in shown:
        lines.append(f"- {c.name} ({c.role}): " + ", ".join(f"{k}={v}" for k, v in c.vars.items()))
    if task.flops is not None or task.bytes is not None:
        lines.append(f"Cost model per launch (compulsory work, used for the roofline): flops = {task.flops}, "
                     f"bytes = {task.bytes}")
    if task.hints:
        lines.append(f"\nTask hints: {task.hints}")
    return "\n".join(lines)


def _reference_section(reference_source: str) -> str:
    return ("# Reference (the trusted definition of the result)\n"
            + fence(clip_source(reference_source, REFERENCE_CHARS), "python"))


def arch_section(device: dict | None) -> str:
    """What a strong model needs to know of the GPU's architecture beyond its limits (sm_90:
    Hopper), for the arch NVRTC compiles to."""
    device = device_description.complete(device)
    arch = (device or {}).get("arch") or ""
    if not arch.startswith("sm_90"):
        return ""
    target = target_arch(arch)
    a = target == "sm_90a"
    return "\n".join([
        f"# {arch} (Hopper) facts",
        "- FP32 issue: 4 schedulers per SM, each issuing one warp instruction a cycle; an FFMA does 32 FMAs, so the "
        "fp32 peak needs an FFMA in nearly every issue slot. Every other instruction (LDS, address math, loop "
        "control) takes a slot from an FFMA: at a high FMA share, count instructions, not stalls.",
        "- `cp.async` (`__pipeline_memcpy_async` of cuda_pipeline.h, or `cuda::memcpy_async`): global to shared "
        "memory with no register round trip, 4/8/16 bytes (16-byte `.cg` skips L1); commit groups and wait for all but "
        "the newest N to keep several stages in flight.",
        "- Bulk copies: `cp.async.bulk` moves a 16-byte-aligned block from one thread, completed through an "
        "mbarrier; TMA tensor maps need a host descriptor this harness cannot make.",
        "- mbarrier (`cuda::barrier` in shared memory): split arrive/wait and transaction counts, so producer and "
        "consumer warps overlap without __syncthreads.",
        "- Clusters (`__cluster_dims__`, the grid a multiple of it; cooperative_groups::this_cluster()) of up to 8 "
        "blocks run together; "
        "distributed shared memory (`cluster.map_shared_rank`) lets blocks share an operand tile or sum "
        "split-K partials without global memory.",
        (f"- NVRTC targets `{target}`: `wgmma.mma_async` and `setmaxnreg` are available (warpgroups of 128 "
         "threads; operands in shared memory through matrix descriptors; the library's pattern gemm_f16_wgmma "
         "shows the 128-byte swizzle they read)." if a else
         f"- NVRTC targets `{target}`, not `sm_90a`: no `wgmma.mma_async`, no `setmaxnreg` (tensor cores only "
         "through mma.sync/wmma).")])


def static_prefix(task: Task, *, reference_source: str, device: dict | None, calibration: dict | None,
                  stable: tuple[str, ...] = ()) -> str:
    """Task, device, its architecture's facts and reference, then ``stable`` sections (the expert
    pattern, the archive's kernels): the same for every call of a run."""
    return "\n\n".join(x for x in [_task_section(task), device_description.render(device, calibration, task),
                                    arch_section(device), _reference_section(reference_source), *stable] if x)



# -- the current best -------------------------------------------------------------------------
def _static_resources(task: Task, a: PromptAttempt, device: dict | None) -> str:
    """Registers and shared memory from the compile log (ptxas) and the occupancy they allow
    per performance case, where the attempt was compiled but not measured."""
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.common.errors import KForgeError
    from kernel_forge.gpu.nvrtc import parse_resources
    from kernel_forge.model.occupancy import resources_for_case

    res = parse_resources(a.compile_log or "")
    device = device_description.complete(device)
    if not res.get("registers") or not device:
        return ""
    try:
        cand = parse_candidate(a.source, name=f"{a.id}.cu")
    except KForgeError:
        return ""
    launch = cand.launch or task.launch
    lines = [f"Resources (ptxas, compiled for {device['arch']}; not measured yet): {res['registers']} registers/thread, "
             f"{res.get('spill_stores', 0)} B spill stores, {res.get('smem', 0)} B static shared memory"]
    for case in task.cases_with("performance"):
        try:
            g, b, s = launch.resolve({**case.vars, **cand.defines})
        except (KForgeError, AttributeError):
            continue
        r = resources_for_case({"resources": res}, {"grid": list(g), "block": list(b), "shared_mem": s}, device)
        if r:
            blocks = g[0] * g[1] * g[2]
            limit = f", limited by {r['occupancy_limiter']}" if r["occupancy"] < 1 else ""
            lines.append(f"- {case.name}: grid {list(g)} x block {list(b)} = {blocks} blocks; {r['blocks_per_sm']} "
                         f"blocks/SM ({100 * r['occupancy']:.0f}% theoretical occupancy{limit}); "
                         f"{blocks / max(1, r['blocks_per_sm'] * device['sms']):.2f} waves")
    return "\n".join(lines)


def _measurements(a: PromptAttempt) -> str:
    rows = []
    for c in shown_cases(a.cases):
        t = c.get("timing") or {}
        if t:
            extra = []
            if c.get("pct_peak_bw") is not None:
                extra.append(f"{c['pct_peak_bw']:.1f}% of measured bandwidth")
            rows.append(f"- {c['name']}: median {us(t['median'])} µs (p10 {us(t['p10'])}, p90 {us(t['p90'])})"
                        + (f"; {', '.join(extra)}" if extra else ""))
    return "\n".join(rows)


def _profile_lines(profile: dict | None) -> str:
    if not profile:
        return ""
    if not profile.get("available"):
        return f"No profiler metrics: {profile.get('reason') or 'not available'}."
    from kernel_forge.analysis.profile_reading import normalise_case, stall_text

    out = []
    for name, p in (profile.get("cases") or {}).items():
        p = normalise_case(p) or {}
        stalls = stall_text(p.get("stalls") or [])
        out.append(f"- {name}: ncu DRAM {p.get('dram_pct')}%, L2 {p.get('l2_pct')}%, SM {p.get('sm_pct')}% of peak; "
                   f"achieved occupancy {p.get('achieved_occupancy_pct')}%" + (f"; top stalls: {stalls}" if stalls else ""))
    return "\n".join(out)


def _best_section(task: Task, best: PromptAttempt, diagnosis, device: dict | None,
                  refs: dict[str, str] | None = None) -> str:
    if best.score_us:
        head = f"# Current best: {best.id}, score {us(best.score_us)} µs (geometric mean of the performance medians)"
        if diagnosis is not None and diagnosis.cases:
            ratios = {}
            for c in diagnosis.cases:
                if c.vs_initial is not None:
                    ratios.setdefault("the initial kernel", []).append(c.vs_initial)
                for b, r in c.vs_baselines.items():
                    ratios.setdefault(b, []).append(r)
            from kernel_forge.common.stats import geomean
            head += "".join(f"; x{geomean(v):.2f} vs {k}" for k, v in ratios.items() if len(v) == len(diagnosis.cases))
    else:
        head = f"# Current best: {best.id}, not measured yet"
    lines = [head]
    if best.rationale and best.id != "initial":
        lines.append(f"Its rationale: {best.rationale[:300]}")
    launch = launch_line(task, best)
    if launch:
        lines.append(f"Run with: {launch}")
    if diagnosis is not None and diagnosis.cases:
        lines += ["", "## Diagnosis (per performance case)", diagnosis.render()]
        if diagnosis.profile_status is None:     # never silently: say the profile is missing
            lines.append(f"(no Nsight Compute profile of {best.id} yet: the figures above are the harness's own)")
    else:
        meas = _measurements(best)
        if meas:
            lines.append(meas)
        if diagnosis is not None and diagnosis.notes:
            lines += [f"- {n}" for n in diagnosis.notes]
        static = _static_resources(task, best, device)
        if static:
            lines += ["", static]
        prof = _profile_lines(best.profile)
        if prof:
            lines.append(prof)
    lines += ["", "## Source", source_block(best.source, refs or {}, MAX_SOURCE_CHARS)]
    return "\n".join(lines)



# -- history ----------------------------------------------------------------------------------
#: an earlier kernel this many times slower than the best is not shown (it teaches little)
SLOWER_SHOWN = 2.0



def _history_section(history: list[PromptAttempt], best: PromptAttempt, n_history: int,
                     refs: dict[str, str] | None = None) -> tuple[str, set[str]]:
    """The section and the ids whose full source it shows: none that is :data:`SLOWER_SHOWN`
    times slower than the best (the loop leaves the initial kernel out once another beats it)."""
    refs = refs or {}
    passed = sorted((h for h in history if h.passed and h.score_us and h.id != best.id
                     and not (best.score_us and h.score_us >= SLOWER_SHOWN * best.score_us)),
                    key=lambda h: (h.score_us, h.id))
    best_key = normalise(best.source)
    groups: dict[str, list[PromptAttempt]] = {}
    for h in passed:
        groups.setdefault(normalise(h.source), []).append(h)
    shown, budget = [], HISTORY_CHARS
    variants: list[str] = []
    for key, members in sorted(groups.items(), key=lambda kv: (kv[1][0].score_us, kv[1][0].id)):
        rep, others = members[0], members[1:]
        if key == best_key:
            others = members
            rep = None
        for o in others:
            same = "the best" if key == best_key else members[0].id
            variants.append(f"- {o.id}: {us(o.score_us)} µs ({per_case(o)}); same source as {same}"
                            + (f" with {defines_text(o.defines)}" if o.defines else " with another launch"))
        if rep is None or len(shown) >= n_history:
            continue
        if budget < 800:
            continue
        text = (source_block(rep.source, refs, HISTORY_KERNEL_CHARS) if normalise(rep.source) in refs
                else clip_kernel(rep.source, min(HISTORY_KERNEL_CHARS, budget)))   # the main loop kept whole
        budget -= len(text)
        shown.append((rep, text))
    if not shown and not variants:
        return "", set()
    parts = ["# Earlier correct kernels, slowest to fastest (the best is above; none twice as slow as it)"]
    for h, text in reversed(shown):
        rel = f"x{best.score_us / h.score_us:.2f} of the best's speed" if best.score_us else ""
        parts.append(f"## {h.id}: {us(h.score_us)} µs ({rel}; per case {per_case(h)})"
                     + (f" — {h.rationale[:200]}" if h.rationale else "")
                     + (f"\nRun with: defines {defines_text(h.defines)}" if h.defines else "")
                     + "\n" + (text if normalise(h.source) in refs else fence(text)))
    if variants:
        parts.append("Other settings of kernels above (not repeated):\n" + "\n".join(variants[:12])
                     + (f"\n- ... and {len(variants) - 12} more" if len(variants) > 12 else ""))
    return "\n\n".join(parts), {h.id for h, _ in shown}



# -- crossover, retrieval ---------------------------------------------------------------------
def _crossover_section(crossover: tuple[PromptAttempt, PromptAttempt], shown: dict[str, str],
                       refs: dict[str, str] | None = None) -> str:
    """``shown``: id -> where its full source already is in this prompt (not repeated).  The
    proposal starts from the first: a diff's edits apply to it."""
    a, b = crossover
    if normalise(a.source) == normalise(b.source):
        return ""            # the same kernel twice has nothing to combine
    parts = [f"# Start from {a.id} and combine it with {b.id} for this proposal\n"
             f"A ```diff block's edits apply to {a.id}."]
    for x in (a, b):
        head = f"## {x.id}: {us(x.score_us)} µs (per case {per_case(x)})"
        parts.append(f"{head}; its source is {shown[x.id]}" if x.id in shown
                     else f"{head}\n{source_block(x.source, refs or {}, MAX_SOURCE_CHARS)}")
    parts.append("Take from each what makes it faster on the cases where it wins.")
    return "\n".join(parts)


def _bound_section(bound: PromptAttempt, refs: dict[str, str]) -> str:
    """The expert pattern of the task's kind written for this task's own signature, with the time it
    passed the gate at (its source once: by name where the archive section shows the pattern)."""
    head = (f"# The expert pattern for this task's kind, already adapted to its signature\n"
            f"{bound.id} passed the gate at {us(bound.score_us)} µs (per case {per_case(bound)}), at its default "
            "setting (its launch and settings are in its // kforge: lines).  Start from it, or take its technique "
            "into the current best.")
    return f"{head}\n{source_block(bound.source, refs, PATTERN_CHARS, 'Its source')}"


def _retrieved_section(task: Task, retrieved) -> str:
    """Archive examples (``retrieval.Example`` or any object/dict with ``task_name``/``task``,
    ``source``, ``score_us``, optionally ``speedup_vs_initial``, ``bound``, ``description``,
    ``same_task``): kernels of other tasks, or of this task from earlier runs, each marked so."""
    parts, budget = [], RETRIEVED_CHARS
    for r in retrieved or ():
        name = field_of(r, "task_name", "task", "name", default="another task")
        source = field_of(r, "source", default="") or ""
        pattern = field_of(r, "pattern", default="") or ""
        if pattern and source:
            # an expert pattern keeps its whole source (they are written to fit): its main loop is the point
            kind = field_of(r, "kind", default="") or "this kind of"
            parts.append(f"## Expert pattern {pattern} for {kind} kernels (written for task {name}; it passes that "
                         f"task's gate, hidden cases included): {field_of(r, 'technique', default='')}\n"
                         + fence(clip_source(source, PATTERN_CHARS)))
            continue
        if not source or budget < 800:
            continue
        same = bool(field_of(r, "same_task", default=False)) or name == task.name
        score = field_of(r, "score_us", "score")
        speedup = field_of(r, "speedup_vs_initial", "speedup")
        bound = field_of(r, "bound", default="") or ""
        note = "" if same else (field_of(r, "description", "note", "rationale", default="") or "")
        head = ("## From an earlier run of this task" if same else f"## From task {name}") \
            + (f": {us(score)} µs" if isinstance(score, (int, float)) else "") \
            + (f", x{speedup:.2f} vs its initial kernel" if isinstance(speedup, (int, float)) else "") \
            + (f", {bound}-bound" if bound and bound != "unknown" else "")
        text = clip_kernel(source, min(4000, budget))
        budget -= len(text)
        parts.append(head + (f"\nIts task: {' '.join(note.split())[:300]}" if note else "") + "\n" + fence(text))
    if not parts:
        return ""
    return ("# Kernels from the archive and the expert patterns (ideas only: another task's signature, sizes and "
            "semantics are not this task's; an earlier run's kernel of this task was measured on its own GPU)\n\n"
            + "\n\n".join(parts))


# -- assembly ---------------------------------------------------------------------------------
def start_best(best: PromptAttempt) -> str:
    """The per-proposal section of a proposal that starts from the current best."""
    return (f"# Start from the current best, {best.id}, for this proposal\n"
            f"Its source is under Current best above. A ```diff block's edits apply to {best.id}.")


def build_prompt_parts(context: PromptContext) -> tuple[str, str]:
    """The user prompt as (static prefix, dynamic rest), the most stable first: the prefix (task,
    device and its architecture, reference, the expert pattern and the archive's kernels) is the
    same for every call of a run; the rest starts with what the iteration's proposals share (the
    best with its ``diagnosis`` -- a :class:`~kernel_forge.analysis.diagnosis.Diagnosis` --, earlier
    kernels, ``failures``, the ``ledger``) and ends with this proposal's own: the kernel it starts
    from: a failed attempt to repair (``fix``), else ``start`` (rendered by
    :func:`kernel_forge.search.reflection.start_section` for a parent other than the best), else two
    parents to combine (``crossover``, edits applying to the first), else the best; then hints,
    ``direction`` and the job (the fields of ``context``).  A kernel whose code is a shown expert
    pattern's is named, not repeated."""
    c = context
    task, best, fix, crossover, bound = c.task, c.best, c.fix, c.crossover, c.bound
    history, failures = c.history, c.failures
    refs = pattern_refs(c.retrieved)
    stable = (_retrieved_section(task, c.retrieved),
              _bound_section(bound, refs) if bound is not None else "")
    static = static_prefix(task, reference_source=c.reference_source, device=c.device, calibration=c.calibration,
                           stable=stable)
    known = {a.id: a.source for a in [best, *history, *failures, *(crossover or ()), *([fix] if fix else [])]}
    parts = [_best_section(task, best, c.diagnosis, c.device, refs)]
    history_text, in_history = _history_section(history, best, c.n_history, refs)
    shown = {best.id: "under Current best"} | {i: "under Earlier correct kernels" for i in in_history}
    if bound is not None:          # in the static part above: named by a crossover with it, never repeated
        shown.setdefault(bound.id, "under The expert pattern for this task's kind above")
    for section in (history_text,
                    failures_section(task, [f for f in failures if fix is None or f.id != fix.id], known),
                    c.ledger):
        if section:
            parts.append(section)
    # this proposal's own, last: the prompts of an iteration share everything above
    if fix is not None:
        parts.append(fix_section(task, fix, known))
    elif c.start:
        parts.append(c.start)
    elif crossover and normalise(crossover[0].source) != normalise(crossover[1].source):
        parts.append(_crossover_section(crossover, shown, refs))
    else:
        parts.append(start_best(best))
    job = ("Submit the repaired kernel: correct on every size, and as fast as its idea allows."
           if fix is not None else
           "Submit one kernel that is correct on every size and faster than the current best. "
           "Say in the rationale what you changed, which limit it addresses, and what speedup you expect.")
    return static, "\n\n".join(parts + closing_sections(c.hints, c.direction, job))


def closing_sections(hints: str, direction: str, job: str) -> list[str]:
    """The sections every proposal prompt ends with: the user's hints, this proposal's direction
    (each only when given) and the job."""
    return ((["# Hints\n" + hints] if hints else [])
            + ([f"# Direction for this proposal\n{direction}"] if direction else [])
            + ["# Your job\n" + job])


def build_prompt(context: PromptContext) -> str:
    """The whole user prompt: :func:`build_prompt_parts` joined."""
    static, dynamic = build_prompt_parts(context)
    return static + "\n\n" + dynamic


def render_prompt(system: str, static: str, dynamic: str | list[str]) -> str:
    """The text of ``prompt-NNN.md``: the system prompt, the static prefix and each dynamic part."""
    dyn = [dynamic] if isinstance(dynamic, str) else list(dynamic)
    out = ["<!-- kforge prompt: system, user static prefix (cached), user dynamic part(s) -->",
           "## system", system.rstrip(), "", "## user: static prefix", static.rstrip()]
    for i, d in enumerate(dyn, 1):
        out += ["", "## user: dynamic part" + (f" (proposal {i} of {len(dyn)})" if len(dyn) > 1 else ""), d.rstrip()]
    return "\n".join(out) + "\n"


def write_prompt(run_dir, iteration: int, system: str, static: str, dynamic: str | list[str]) -> str:
    """Write what the model was asked in ``iteration`` to ``prompt-NNN.md`` in the run folder
    (a :class:`~kernel_forge.evidence.run_dir.RunDir` or a path); return the file name."""
    name = f"prompt-{int(iteration):03d}.md"
    text = render_prompt(system, static, dynamic)
    if not isinstance(run_dir, (str, Path)):      # a RunDir: atomic, scrubbed
        run_dir.write_text(name, text)
    else:
        from kernel_forge.common.writes import write_text
        write_text(Path(run_dir) / name, text)
    return name
