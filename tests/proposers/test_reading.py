"""kernel_forge.proposers.reading: the answer format asked for, and the proposal read from an answer."""
from __future__ import annotations

from kernel_forge.proposers.reading import read_proposal, repair_text, shorter_text, system_text

KERNEL = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 0; }\n'


def test_tool_mode_replaces_the_answer_format_section_of_the_system_prompt():
    system = "You write kernels.\n\nAnswer format: a ```cuda block."
    assert system_text(system, "fenced") == system
    tool = system_text(system, "tool")
    assert tool.startswith("You write kernels.\n\nAnswer format: call the `submit_kernel` tool once")
    assert "```cuda block" not in tool


def test_the_repair_and_shorter_turns_say_what_to_send_in_the_format_asked():
    assert repair_text("no kernel", "tool").startswith("The submit_kernel call was rejected: no kernel. Call")
    assert repair_text("no kernel", "fenced").startswith("Your answer could not be used: no kernel. Answer again")
    assert "(4096 tokens)" in shorter_text(4096, "fenced") and "call submit_kernel once" in shorter_text(1, "tool")


def test_a_tool_answer_may_come_as_a_fenced_block_and_a_problem_names_why_the_answer_stopped():
    read = read_proposal("tool", (False, None, None), f"```cuda\n{KERNEL}```", "stop", None)
    assert read.problem is None and read.args["source"] == KERNEL and read.rationale_prefix == "[from text]"
    bad = read_proposal("tool", (True, None, "the arguments are not valid JSON (x)"), "", "stop", None)
    assert bad.problem == "the arguments are not valid JSON (x)"
    none = read_proposal("fenced", (False, None, None), "no code here", "stop_reason=end_turn", None)
    assert none.problem.endswith("(stop_reason=end_turn)") and none.args is None
