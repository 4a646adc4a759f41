"""Build the proposer's prompt from files and the loop's records (never holdout cases).

The system prompt is ``prompts/system.md``.  The user prompt has these sections, in order: the
task, the device, the reference, the current best kernel and its measurements, earlier correct
kernels from slowest to fastest, recent failures summarised, user hints, and sometimes two
parents to combine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

from .task import Task
from .verdict import REASONS

MAX_SOURCE_CHARS = 12000


@dataclass
class PromptAttempt:
    """What the prompt needs to know about one attempt."""

    id: str
    source: str
    passed: bool
    reason: str
    message: str
    score_us: float | None
    cases: list[dict] = field(default_factory=list)   # CaseResult.to_json(False) (holdout removed)
    compile_log: str = ""
    rationale: str = ""
    defines: dict = field(default_factory=dict)
    parent: str | None = None                         # the attempt it was derived from
    diff: str = ""                                    # unified diff of its source against the parent's
    launch: dict | None = None                        # the launch it ran with (Launch.to_json())
    direction: str = ""                               # the direction it was asked to take
    profile: dict | None = None                       # GateLike.profile() summary, when profiled


def system_prompt() -> str:
    return resources.files("kernel_forge").joinpath("prompts/system.md").read_text()


def _clip(text: str, limit: int = MAX_SOURCE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n// ... ({len(text) - limit} more characters)"


def _task_section(task: Task) -> str:
    lines = [f"# Task: {task.name}", task.description or "", "", "Entry point:", "```cuda",
             task.signature.text, "```", "", "Arguments:"]
    for a in task.args:
        if a.is_buffer:
            kind = "output" if a.output and not a.in_out else ("in/out (reset before each launch)"
                                                               if a.in_out else "input")
            lines.append(f"- `{a.param.text}`: shape [{', '.join(map(str, a.shape))}], {kind}")
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
        lines.append(f"Cost model per launch: flops = {task.flops}, bytes = {task.bytes}")
    return "\n".join(lines)


def _device_section(device: dict | None, calibration: dict | None) -> str:
    if not device:
        return "# Device\n(unknown)"
    cal = calibration or {}
    lines = ["# Device",
             f"{device['name']} ({device['arch']}), {device['sms']} SMs, "
             f"{device['memory_bytes'] / 2**30:.0f} GiB, L2 {device['l2_bytes'] / 2**20:.0f} MiB, "
             f"max {device['max_smem_per_block_optin']} bytes shared memory per block (opt-in)"]
    if cal.get("bandwidth"):
        lines.append(f"Measured copy bandwidth {cal['bandwidth'] / 1e9:.0f} GB/s; fp32 peak "
                     f"{device['fp32_peak'] / 1e12:.1f} TFLOP/s; 16-bit tensor peak {device['tensor_peak'] / 1e12:.0f} TFLOP/s")
    return "\n".join(lines)


def _measurements(a: PromptAttempt) -> str:
    rows = []
    for c in a.cases:
        if c.get("role") == "holdout":
            continue
        t = c.get("timing") or {}
        if t:
            extra = []
            if c.get("pct_peak_bw") is not None:
                extra.append(f"{c['pct_peak_bw']:.1f}% of measured bandwidth")
            if c.get("pct_peak_flops") is not None:
                extra.append(f"{c['pct_peak_flops']:.1f}% of fp32 peak")
            rows.append(f"- {c['name']}: median {t['median']:.2f} µs (p10 {t['p10']:.2f}, p90 {t['p90']:.2f})"
                        + (f"; {', '.join(extra)}" if extra else ""))
    return "\n".join(rows)


def _failure_summary(a: PromptAttempt) -> str:
    head = f"- {a.id}: {a.reason} ({REASONS.get(a.reason, '')})"
    detail = a.message.strip().splitlines()[:6]
    if a.reason == "compile_error" and a.compile_log:
        errs = [l for l in a.compile_log.splitlines() if "error" in l][:5]
        detail = errs or detail
    body = "\n".join(f"    {l}" for l in detail)
    return head + ("\n" + body if body else "")


def build_prompt_parts(task: Task, *, reference_source: str, device: dict | None, calibration: dict | None,
                       best: PromptAttempt, history: list[PromptAttempt], failures: list[PromptAttempt],
                       hints: str = "", crossover: tuple[PromptAttempt, PromptAttempt] | None = None,
                       n_history: int = 5, diagnosis=None, fix: PromptAttempt | None = None,
                       direction: str = "", retrieved: tuple = ()) -> tuple[str, str]:
    """The user prompt as (static prefix, dynamic rest): the prefix (task, device, reference) is the
    same for every call of a run; ``diagnosis`` is a :class:`~kernel_forge.diagnosis.Diagnosis` of
    the best, ``fix`` a failed attempt to repair, ``direction`` this proposal's direction and
    ``retrieved`` kernels of other tasks from the archive."""
    full = build_prompt(task, reference_source=reference_source, device=device, calibration=calibration,
                        best=best, history=history, failures=failures, hints=hints, crossover=crossover,
                        n_history=n_history)
    parts = full.split("\n\n# Current best", 1)
    static, rest = (parts[0], "# Current best" + parts[1]) if len(parts) == 2 else ("", full)
    if direction:
        rest += f"\n\n# Direction for this proposal\n{direction}"
    return static, rest


def build_prompt(task: Task, *, reference_source: str, device: dict | None, calibration: dict | None,
                 best: PromptAttempt, history: list[PromptAttempt], failures: list[PromptAttempt],
                 hints: str = "", crossover: tuple[PromptAttempt, PromptAttempt] | None = None,
                 n_history: int = 5) -> str:
    parts = [_task_section(task), _device_section(device, calibration),
             "# Reference (the trusted definition of the result)\n```python\n" + _clip(reference_source, 6000) + "\n```"]
    score = f"score {best.score_us:.2f} µs (geometric mean of medians)" if best.score_us else "not measured yet"
    parts.append(f"# Current best: {best.id}, {score}\n"
                 + _measurements(best) + "\n```cuda\n" + _clip(best.source) + "\n```")
    earlier = [h for h in history if h.passed and h.id != best.id and h.score_us]
    earlier = sorted(earlier, key=lambda h: -h.score_us)[-n_history:]   # slow -> fast
    if earlier:
        parts.append("# Earlier correct kernels, slowest to fastest")
        for h in earlier:
            parts.append(f"## {h.id}: {h.score_us:.2f} µs" + (f" — {h.rationale[:200]}" if h.rationale else "")
                         + "\n```cuda\n" + _clip(h.source, 4000) + "\n```")
    if failures:
        parts.append("# Recent failures (fix these mistakes)\n" + "\n".join(_failure_summary(f) for f in failures))
    if crossover:
        a, b = crossover
        parts.append(f"# Combine the strengths of these two correct kernels ({a.id}, {b.id})\n"
                     f"```cuda\n{_clip(a.source, 5000)}\n```\n```cuda\n{_clip(b.source, 5000)}\n```")
    if hints or task.hints:
        parts.append("# Hints\n" + "\n".join(x for x in (task.hints, hints) if x))
    parts.append("# Your job\nSubmit one kernel that is correct on every size and faster than the current best. "
                 "Say in the rationale what you changed and what speedup you expect.")
    return "\n\n".join(parts)
