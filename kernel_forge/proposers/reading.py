"""The answer format a proposal is asked in, and how its answer is read: the system prompt's
answer-format section in tool mode, the repair and shorter-answer turns, and the proposal in an
answer (a ``submit_kernel`` tool call, or the text of :mod:`.answer`)."""
from __future__ import annotations

from dataclasses import dataclass

from kernel_forge.proposers.answer import read_answer
from kernel_forge.proposers.proposal_schema import TOOL_NAME, check_proposal

#: the heading that starts the answer-format section of prompts/system.md
ANSWER_FORMAT_HEADING = "Answer format:"
TOOL_FORMAT = ("Answer format: call the `submit_kernel` tool once, with the complete .cu file in `source`, "
               "a rationale of a few sentences, and `launch`, `tunables`, `direction`, `technique` and "
               "`predicted_speedup` where they apply.")
TOOL_REPAIR = ("Call submit_kernel again with the complete corrected proposal: the full .cu source in "
               "`source` and a short `rationale`; `launch` and `tunables` only if needed and valid.")
TEXT_REPAIR = ("Answer again in the answer format: a few sentences, then the complete kernel in one ```cuda "
               "block (or SEARCH/REPLACE edits against the kernel this proposal builds on in one ```diff "
               "block), then one ```json block with launch, tunables, direction, technique and "
               "predicted_speedup where they apply.")


@dataclass
class Reading:
    """What a provider made of one answer."""

    args: dict | None = None          # the proposal's arguments (source, rationale, launch, ...)
    problem: str | None = None        # why the answer is unusable (None: usable)
    rationale_prefix: str = ""        # "[from text]" when a tool answer came as a fenced block


def system_text(system: str, answer_format: str) -> str:
    """The system prompt as sent: in tool mode, its answer-format section says to call the tool."""
    if answer_format != "tool" or not system:
        return system
    head, sep, _ = system.partition(ANSWER_FORMAT_HEADING)
    return (head.rstrip() + "\n\n" + TOOL_FORMAT + "\n") if sep else system


def repair_text(problem: str, answer_format: str) -> str:
    """The turn that asks again for an answer that could not be used, quoting ``problem``."""
    if answer_format == "tool":
        return f"The submit_kernel call was rejected: {problem}. {TOOL_REPAIR}"
    return f"Your answer could not be used: {problem}. {TEXT_REPAIR}"


def shorter_text(limit: int, answer_format: str) -> str:
    """The turn that asks for a shorter answer after one was cut off at the cap (``limit`` tokens)."""
    how = ("call submit_kernel once with the complete kernel source and a rationale of a few sentences"
           if answer_format == "tool" else
           "give the kernel (or SEARCH/REPLACE edits) and the ```json part, with a rationale of a few sentences")
    return (f"Your previous answer was cut off at the output limit ({limit} tokens) before it was "
            f"complete. Answer again so that it fits: think briefly, then {how}.")


def read_proposal(answer_format: str, tool: tuple[bool, object, str | None], text: str, stop: str,
                  parent: str | None) -> Reading:
    """The proposal in an answer: the tool call in tool mode (``tool``: found, its arguments, a
    problem with them; a fenced answer accepted too), else ``text`` in the answer format (edits
    against ``parent``); ``stop`` (why the answer ended) goes into a problem."""
    if answer_format == "tool":
        found, args, problem = tool
        if found:
            if problem is not None:
                return Reading(problem=problem)
            return Reading(args=args if isinstance(args, dict) else None, problem=check_proposal(args))
    answer = read_answer(text, parent)
    if answer.problem is not None:
        if answer_format == "tool" and "no ```cuda block" in answer.problem:
            return Reading(problem=f"the answer held no {TOOL_NAME} tool call and no fenced CUDA block "
                                   f"with a __global__ function ({stop})")
        return Reading(problem=answer.problem + (f" ({stop})" if stop else ""))
    prefix = "[from text]" if answer_format == "tool" else ""
    return Reading(args=answer.args, problem=check_proposal(answer.args), rationale_prefix=prefix)
