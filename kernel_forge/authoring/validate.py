"""``kforge validate``: a manifest's schema and meaning, its files, its kernels, and weak cases.

Nothing is allocated to validate: each case's size is estimated from its shape expressions and
dtypes, and a case that will not fit the GPU or this host is refused by name.  The initial
kernel and the templates go through the static rules and, when an arch is known, NVRTC; the
reference runs (in a guarded call) only on cases small enough to be cheap, or with ``deep`` on
every case that fits the host.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernel_forge.gate import preflight
from kernel_forge.model.candidate import load_candidate
from kernel_forge.model.limits import needed_target, target_arch
from kernel_forge.common.errors import CompileError, EnvironmentProblem, ManifestError, ReferenceError_
from kernel_forge.common.json_path import json_path
from kernel_forge.model.task import Task, load_task


def generated_witness(task: Task) -> Path | None:
    """The CUDA witness a generated task names (``$.generated.witness``), where it exists."""
    block = task.generated
    if not block or not block.get("witness"):
        return None
    path = (task.path.parent / block["witness"]).resolve()
    if not path.is_file():
        raise ManifestError(f"the witness kernel {block['witness']} is missing (looked in {path})",
                            file=str(task.path), json_path="$.generated.witness",
                            hint="restore it from the exchange folder, or run kforge init --describe again")
    return path
from kernel_forge.model.weak_cases import weak_case_warnings

#: buffer elements of the largest case whose reference runs without ``deep``
QUICK_ELEMENTS = 1 << 22


@dataclass
class Validation:
    """What ``validate_manifest`` found about one manifest."""

    task: Task
    warnings: list[str] = field(default_factory=list)     #: weak cases and large search spaces
    resolved: list[tuple[str, str, bool]] = field(default_factory=list)  #: (what, where it resolves, outside the manifest's folder)
    arch: str | None = None                               #: what the kernels were compiled for (None: not compiled)
    compiled: list[tuple[str, dict]] = field(default_factory=list)  #: (kernel file name, NVRTC resources)
    not_compiled: str = ""                                #: why the kernels were not compiled
    skipped: list[tuple[str, str]] = field(default_factory=list)    #: (case, why its reference was not run)
    notes: list[str] = field(default_factory=list)        #: facts worth a line (no initial kernel, a generated task)
    kind: str = ""                                        #: the kind line: what the reference computes, and the binding

    def lines(self) -> list[str]:
        """What ``kforge validate`` prints under a manifest's ok line."""
        out = [f"{what:<10} {where}" + ("  (outside the manifest's folder)" if outside else "")
               for what, where, outside in self.resolved]
        if self.compiled:
            out.append(f"compiled for {self.arch}: " + ", ".join(
                f"{name} ({r.get('registers', '?')} registers"
                + (f", {r['spill_stores']} B spill stores" if r.get("spill_stores") else "") + ")"
                for name, r in self.compiled))
        elif self.not_compiled:
            out.append(f"not compiled: {self.not_compiled}")
        by_reason: dict[str, list[str]] = {}
        for case, why in self.skipped:
            by_reason.setdefault(why, []).append(case)
        for why, cases in by_reason.items():
            out.append(f"reference not run on {', '.join(cases)}: {why}")
        return out + ([self.kind] if self.kind else []) + self.notes

    def __iter__(self):        # ``task, warnings = validate_manifest(...)`` keeps working
        return iter((self.task, self.warnings))


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def resolved_files(task: Task) -> list[tuple[str, str, bool]]:
    """Where every file the manifest names resolves to, and whether it leaves the manifest's
    folder (a reference there is code that runs as you: see README, Security)."""
    base = task.path.parent
    return [(what, shown, not _inside(p, base)) for what, shown, p in task_files(task)]


def task_files(task: Task) -> list[tuple[str, str, Path]]:
    """Every file the manifest names: (what, as shown, its path)."""
    base = task.path.parent

    def ref(r):
        return (str(r.path) + (f":{r.function}" if r.function else ""), r.path)

    rows: list[tuple[str, tuple[str, Path]]] = [("reference", ref(task.reference))]
    rows += [(f"baseline {k}", ref(b)) for k, b in task.baselines.items()]
    if task.initial is not None:
        rows.append(("initial", (str(task.initial), task.initial)))
    rows += [("template", (str(t), t)) for t in task.templates]
    if task.generated and task.generated.get("witness"):
        w = (base / task.generated["witness"]).resolve()
        rows.append(("witness", (str(w), w)))
    for a in task.args:
        if a.is_buffer and a.init is not None and a.init.kind == "npy":
            p = (base / a.init.get("path")).resolve()
            rows.append((f"npy {a.name}", (str(p), p)))
    return [(what, shown, p) for what, (shown, p) in rows]


def _dynamic_shared_without_bytes(task: Task, cand) -> int:
    """The line of the kernel's first ``extern __shared__`` declaration when its launch gives it no
    dynamic shared memory (cuda-samples' shfl_scan sizes it at its ``<<<>>>``, which init does not
    read); 0 otherwise."""
    import re

    from kernel_forge.common.static_rules import strip_comments_and_strings

    code = strip_comments_and_strings(cand.source)
    # `extern __shared__ T s[];` or `extern __align__(16) __shared__ ...`, not an `extern "C"` kernel whose
    # body declares static __shared__ arrays (nothing between extern and __shared__ may open a body)
    m = re.search(r"\bextern\s+(?:__shared__\s+[^;]*|[^;{}]*\s__shared__\s)", code)
    if m is None:
        return 0
    launch = cand.launch or task.launch
    if launch is None or str(launch.shared_mem).strip() not in ("0", ""):
        return 0                   # an expression: its value is the author's
    return code.count("\n", 0, m.start()) + 1


def _kernel(task: Task, path: Path, jp: str, arch: str | None, report: Validation, label: str,
            limits: dict | None = None) -> None:
    cand = load_candidate(path)
    try:
        preflight.check_kernel(task, cand, file=str(path), limits=limits)
    except preflight.KernelRefused as exc:
        raise ManifestError(exc.message, file=str(task.path), json_path=jp, hint=exc.hint) from None
    unsized = _dynamic_shared_without_bytes(task, cand)
    if unsized:
        report.warnings.append(f"{label} {path.name}:{unsized}: the kernel declares `extern __shared__` memory and "
                               "every case launches it with 0 bytes of it: set the manifest's launch.shared_mem "
                               "(bytes, an expression of the case's sizes) or a `// kforge: shared_mem = ...` line")
    if cand.tunables:
        count = cand.count_configurations()
        if count > 4096:
            report.warnings.append(f"{label} {path.name}: {count.describe()} configurations of its tunables; "
                                   "the tuner gates a sample of them (--tune-budget)")
    if arch is None:
        return
    try:
        res = preflight.compile_kernel(cand, arch, file=str(path), headers=task.header_sources())
    except CompileError as exc:                       # NVRTC's message, and what to add where a hint knows
        raise ManifestError(f"{exc.message}", file=str(task.path), json_path=jp, hint=exc.hint) from None
    report.compiled.append((path.name, res.resources))


def validate_manifest(path, *, deep: bool = False, arch: str | None = preflight.DEFAULT_ARCH,
                      compile: bool = True, gpu_memory: int | None = preflight.DEFAULT_GPU_MEMORY,
                      host_memory: int | None = None, reference: bool | None = None,
                      arch_where: str = "--arch") -> Validation:
    """Validate one manifest; raise an InputError (naming the file and JSON path) at the first
    problem.  ``arch`` None or ``compile`` False skips NVRTC (the report says so), as does a
    machine without NVRTC; a bad ``arch`` is refused first, named as ``arch_where`` says.
    ``reference``: whether the reference runs (the weak-case lint of the outputs); None: unless
    the task is model-written and not reviewed yet (accepted or edited).  A model-written
    reference runs in the sandbox."""
    from kernel_forge.config.gate_settings import check_arch

    if arch is not None:
        check_arch(arch, where=arch_where)
    task = load_task(path)
    report = Validation(task, resolved=resolved_files(task))
    preflight.check_sizes(task, gpu_bytes=gpu_memory, host_bytes=host_memory,
                          gpu_label="given" if gpu_memory != preflight.DEFAULT_GPU_MEMORY else "assumed (80 GiB)")
    use_arch = arch if compile else None
    if use_arch is not None:
        why = preflight.nvrtc_available()
        if why:
            report.not_compiled = f"NVRTC is not available here ({why})"
            use_arch = None
    else:
        report.not_compiled = "no arch given" if compile else "--no-compile"
    report.arch = use_arch
    limits = preflight.launch_limits(arch)     # the arch's launch limits, compiled or not
    try:
        if task.initial is not None:
            _kernel(task, task.initial, "$.initial", use_arch, report, "initial", limits)
        else:
            report.notes.append("no initial kernel: the first proposals translate the reference, and the first "
                                "translation that passes the gate and the holdout becomes the baseline")
        witness = generated_witness(task)
        if witness is not None:
            _kernel(task, witness, "$.generated.witness", use_arch, report, "witness", limits)
        for i, t in enumerate(task.templates):
            needs = needed_target(Path(t).read_text(encoding="utf-8"))
            if arch is not None and needs is not None and needs != target_arch(arch):
                report.notes.append(f"{json_path('templates', i)}: {Path(t).name} is for {needs} only (it stops "
                                    f"itself elsewhere): not checked for {arch}; the tuner's attempts of it fail there")
                continue
            _kernel(task, t, json_path("templates", i), use_arch, report, "template", limits)
    except EnvironmentProblem as exc:
        report.compiled, report.not_compiled = [], exc.message
    skipped: list = []
    run = reference if reference is not None else not _unreviewed(task)
    try:
        report.warnings += weak_case_warnings(task, max_elements=(1 << 62) if deep else QUICK_ELEMENTS,
                                              fits=lambda c: preflight.fits_host(task, c, host_memory),
                                              skipped=skipped, run_reference=run)
    except ReferenceError_ as exc:     # the reference is the manifest's: say which file and where
        raise ReferenceError_(f"{task.path}: $.reference: {exc.message}", hint=exc.hint) from None
    report.skipped = [(c.name, why) for c, why in skipped]
    if not run and task.generated is not None:
        report.notes.append(f"reference not run: {task.reference.path.name} is model-written and not reviewed yet; "
                            f"kforge validate --accept {task.path} runs it, in a sandbox")
    else:
        report.kind = kind_line(task)
    report.notes += generated_notes(task) + sandbox_notes(task)
    return report


def _unreviewed(task: Task) -> bool:
    from kernel_forge.model.generated import review

    r = review(task)
    return r is not None and not r.usable


def sandbox_notes(task: Task) -> list[str]:
    """Which layers of the sandbox held where a model-written reference ran in this process."""
    from kernel_forge.common.sandbox import summary
    from kernel_forge.model.reference_process import sandbox_layers

    layers = sandbox_layers(task)
    return [f"the reference ran in the {summary(layers)}"] if layers else []


def kind_line(task: Task) -> str:
    """What the reference computes (``kernel_forge.kinds``): the kind, the binding and the
    parameters, or that nothing matched.  A kind the manifest states and the reference does not
    bear out is a ManifestError naming ``$.kind``."""
    from kernel_forge.kinds import KindMismatch, identify
    from kernel_forge.kinds.bind import Unbindable, instantiate

    try:
        found = identify(task)
    except KindMismatch as exc:
        raise ManifestError(str(exc), file=str(task.path), json_path="$.kind",
                            hint="correct the kind, its binding or its params, or leave them out to have them read "
                                 "from the reference") from None
    except ReferenceError_ as exc:
        raise ReferenceError_(f"{task.path}: $.reference: {exc.message}", hint=exc.hint) from None
    line = found.line()
    if found.match is not None:
        try:
            bound = instantiate(task, found.match)
            line += "; bound patterns: " + ", ".join(b.label for b in bound)
        except Unbindable as exc:
            line += f"; no bound pattern ({exc})"
    return line


def generated_notes(task: Task) -> list[str]:
    """What ``validate`` says of a task ``kforge init --describe`` wrote: who wrote it, the
    cross-check, and whether it was accepted (``kernel_forge.authoring.acceptance``)."""
    from kernel_forge.model.generated import review

    r = review(task)
    if r is None:
        return []
    b = r.block
    state = (f"accepted by {b.get('accepted_by')} at {b.get('accepted_at')}" if r.accepted else
             f"edited since it was generated ({', '.join(r.edited)}): taken as reviewed" if r.usable else
             f"NOT accepted: kforge optimize refuses it until kforge validate --accept {task.path}")
    return [f"generated by {b.get('model')} at {b.get('created')}; witnesses' cross-check: {r.crosscheck}; {state}"]
