"""The translation phase: a task without an initial kernel starts from its reference.

While a run has no baseline (:func:`translating`: the manifest names no ``initial`` and no
translation has passed yet), every proposal is asked to translate the reference into a first
CUDA kernel (:func:`prompt_parts`, asked by
:func:`kernel_forge.search.request_build.translation_request`: the reference's source, the
signature and the launch contract; the failures of earlier translations -- compile errors on
their lines, first mismatches -- and a fix turn, as for any failure).  The built-in tuner, which reads no prompt, proposes the task's
templates instead.

After an iteration is gated, :func:`choose_baseline` takes its first attempt that passed the
correctness and performance cases and then passes the hidden holdout cases with fresh inputs:
that attempt is the run's baseline -- the ``initial`` every speedup is measured against, marked
``baseline`` in history.json -- and the rest of the iteration competes with it as usual.
:func:`kernel_forge.reports.summary.origin` says where a run's baseline came from (summary.json,
report.md).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kernel_forge.model.candidate import Candidate
from kernel_forge.gate.gatelike import GateLike

if TYPE_CHECKING:
    from kernel_forge.records.attempt import Attempt
    from kernel_forge.records.run_state import RunState
    from kernel_forge.model.task import Task

HIDDEN = "failed a hidden case (details withheld from proposers)"

#: what the proposals of one translation iteration are asked to do (one each, in turn)
DIRECTIONS = (
    "a direct translation: one thread per output element, as the reference reads",
    "a direct translation with a grid-stride loop over the outputs",
    "a direct translation with one block per row (or outer index) where the reference reduces along an axis",
)


def translating(state: "RunState") -> bool:
    """The run has no baseline yet: no initial kernel, and no translation has passed."""
    return state.initial is None


def directions(k: int) -> list[str]:
    """``k`` directions for the proposals of a translation iteration."""
    return [DIRECTIONS[i % len(DIRECTIONS)] for i in range(max(0, k))]


def _launch_contract(task: "Task") -> str:
    if task.launch is None:
        return ("The task has no default launch: give yours in the file, as `// kforge: grid = [...]` and "
                "`// kforge: block = [...]` lines (expressions over the case variables).")
    dims = lambda t: "[" + ", ".join(str(x) for x in t) + "]"  # noqa: E731
    return (f"It is launched with the task's default launch: grid {dims(task.launch.grid)}, block "
            f"{dims(task.launch.block)}, dynamic shared memory {task.launch.shared_mem}. A kernel that needs "
            "another launch says so in the file with `// kforge: grid = [...]` and `// kforge: block = [...]` lines.")


def translation_section(task: "Task") -> str:
    """What a translation proposal is asked to do."""
    return "\n".join([
        "# There is no CUDA kernel for this task yet: translate the reference",
        "Write the first CUDA kernel for this task: a faithful translation of the reference above (the "
        "trusted definition of the result), with the entry point exactly as given:",
        "```cuda", task.signature.text.rstrip(" {;"), "```",
        _launch_contract(task),
        "Every parameter arrives as the task's arguments say (buffers as device pointers, scalars by value); "
        "write every element of every output on every launch.",
        "It is checked on every shown case and on hidden cases of other sizes with fresh inputs. The first "
        "translation that passes becomes the baseline every later kernel is measured against, so write the "
        "straightforward kernel an engineer would write first: correct for every size, clear, not tuned.",
    ])


def prompt_parts(task: "Task", *, reference_source: str, device: dict | None, calibration: dict | None,
                 failures: list, fix=None, hints: str = "", direction: str = "") -> tuple[str, str]:
    """(static prefix, dynamic part) of a translation prompt.  The static prefix is the one every
    prompt of the run shares (task, device, reference); ``failures`` and ``fix`` are
    :class:`~kernel_forge.search.prompt_blocks.PromptAttempt` s of earlier translations."""
    from kernel_forge.search.prompt_failures import failures_section, fix_section
    from kernel_forge.search.prompts import closing_sections, static_prefix

    static = static_prefix(task, reference_source=reference_source, device=device, calibration=calibration)
    known = {a.id: a.source for a in [*failures, *([fix] if fix else [])]}
    parts = [translation_section(task)]
    shown = [f for f in failures if fix is None or f.id != fix.id]
    for section in (failures_section(task, shown, known) if shown else "",
                    fix_section(task, fix, known) if fix is not None else ""):
        if section:
            parts.append(section)
    job = ("Submit the repaired translation: the complete corrected file." if fix is not None else
           "Submit one complete .cu file: the translation. Say in the rationale how it maps the "
           "reference's loops onto threads.")
    return static, "\n\n".join(parts + closing_sections(hints, direction, job))


def choose_baseline(gate: GateLike, batch: list["Attempt"], *, candidate: Callable[["Attempt"], Candidate],
                    save: Callable[[], None] = lambda: None) -> "Attempt | None":
    """The first attempt of ``batch`` (in the order gated) that passed and then passes the holdout
    cases with fresh inputs, marked ``best`` and ``baseline``; None when none does.  A passed
    attempt that fails the holdout is rejected (``holdout_failed``) as in the search."""
    for a in batch:
        if a.status != "passed" or not a.score_us:
            continue
        hold = gate.evaluate(candidate(a), roles=("holdout",))
        a.holdout = {"passed": hold.passed, "reason": hold.reason, "message": hold.message, "final": False}
        if not hold.passed:
            a.status, a.reason, a.message = "failed", "holdout_failed", HIDDEN
            save()
            continue
        a.best = a.baseline = True
        a.message = "the run's baseline: the first translation that passed the gate and the holdout"
        save()
        return a
    return None


