"""kernel_forge.search.prompt_failures: what a prompt shows of failed attempts -- the recent failures and a
failed attempt to fix, each with its reason, compiler errors at their lines, first mismatches, the launch
and settings it ran with and its change from its parent; a hidden case never named.  Most tests read
the prompt built from the recorded matmul_f32 run (tests/recorded_run.py)."""
from __future__ import annotations

from dataclasses import replace

from kernel_forge.search.prompt_blocks import PromptAttempt
from kernel_forge.search.prompt_failures import failures_section, fix_section, launch_line

from tests.support import recorded_run as rec
from tests.support.recorded_run import prompt_parts, section


# ------------------------------------------------------------------------- in the prompt (moved from test_prompts.py)


def test_a_compile_error_is_mapped_to_the_line_of_its_source():
    _, dyn = prompt_parts()
    fails = section(dyn, "Recent failures")
    assert "- a0001: compile_error: a0001.cu: NVRTC could not compile it: line 14" in fails
    block = fails[fails.index("## a0001"):fails.index("## a0002")]
    assert "- line 14: identifier \"arw\" is undefined" in block
    assert "     14 |         acc += arw[p] * b[(size_t)p * n + col];" in block
    assert "Its change from a0000:" in block and "+        acc += arw[p]" in block     # the diff, shorter than its source


def test_a_mismatch_shows_the_case_the_gate_s_message_and_the_first_mismatches():
    _, dyn = prompt_parts()
    fails = section(dyn, "Recent failures")
    block = fails[fails.index("## a0002"):]
    assert block.startswith("## a0002: mismatch (outputs differ from the reference beyond tolerance)")
    assert "- case odd (m=31, n=37, k=29): mismatch: draw 1 (seed 0), first launch: c: 1147 of 1147 elements differ" in block
    assert "first mismatches of c: [0, 0] got 1.0371, expected -0.4185; [0, 1] got 2.2063, expected 2.7352" in block
    assert "-    for (int p = 0; p < k; ++p) {\n+    for (int p = 0; p + 1 < k; ++p) {" in block


def test_a_failure_shows_its_defines_and_a_diff_the_loop_gives():
    at = rec.attempts()
    f = replace(rec.prompt_attempt(at["a0002"]), defines={"BLOCK": 128}, diff="--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n",
                direction="unroll k by 4")
    _, dyn = prompt_parts(failures=[f])
    fails = section(dyn, "Recent failures")
    assert "defines BLOCK=128" in fails and "Its direction was: unroll k by 4" in fails
    assert "```diff\n--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n```" in fails
    # with no parent to diff against, the source itself
    lone = replace(rec.prompt_attempt(at["a0002"]), parent=None)
    _, dyn = prompt_parts(failures=[lone], history=[])
    assert "Its source:\n```cuda\n// matmul_f32: row-major" in section(dyn, "Recent failures")


def test_failures_are_deduplicated_and_bounded():
    at = rec.attempts()
    f = rec.prompt_attempt(at["a0002"])
    many = [replace(f, id=f"a{200 + i:04d}") for i in range(6)]              # the same source six times
    _, dyn = prompt_parts(failures=many)
    assert section(dyn, "Recent failures").count("## a02") == 1
    long = [replace(f, id=f"a{300 + i:04d}", parent=None, source=f.source + f"\n// {i}\n" + "// pad\n" * 2000)
            for i in range(8)]
    _, dyn = prompt_parts(failures=long)
    assert len(section(dyn, "Recent failures")) < 12000


def test_a_fix_turn_shows_the_complete_failed_source():
    at = rec.attempts()
    fix = rec.prompt_attempt(at["a0001"])
    _, dyn = prompt_parts(fix=fix)
    sec = section(dyn, "Fix this failed attempt")
    assert sec.startswith("# Fix this failed attempt: a0001\nIt failed with compile_error")
    assert "Its complete source:\n```cuda\n" + fix.source.split("\n")[0] in sec
    assert "acc += arw[p]" in sec and "     14 |" in sec
    assert "## a0001" not in section(dyn, "Recent failures")                 # not shown twice
    assert section(dyn, "Your job").startswith("# Your job\nSubmit the repaired kernel")


# ------------------------------------------------------------------------- the sections themselves

def failed(aid: str, **kw) -> PromptAttempt:
    fields = dict(id=aid, source="__global__ void k() {}\n", passed=False, reason="mismatch", message="", score_us=None)
    return PromptAttempt(**{**fields, **kw})


def test_the_launch_line_gives_the_launch_a_kernel_ran_with_and_its_defines():
    task = rec.task()
    own = failed("a1", launch={"grid": [8, "cdiv(m, 16)"], "block": [16, 16], "shared_mem": "BK * 4"},
                 defines={"TILE": 16, "BK": 8})
    assert launch_line(task, own) == "launch grid [8, cdiv(m, 16)], block [16, 16], shared_mem BK * 4; defines BK=8 TILE=16"
    assert launch_line(task, failed("a2", launch={"grid": [1], "block": [32], "shared_mem": 0})) == \
        "launch grid [1], block [32]"                                   # no shared memory: not said
    assert launch_line(task, failed("a3")) == "the task's default launch"


def test_a_gate_message_naming_a_hidden_case_is_withheld_and_a_twin_failure_is_shown_once():
    task = rec.task()
    hidden = failed("a0005", message="case holdout: 12 elements differ (m=263, n=131, k=67)")
    alone = failures_section(task, [hidden], known={})
    assert "- a0005: mismatch: failed (details withheld)" in alone
    assert "## a0005: mismatch (" in alone and "Gate: failed on hidden cases (their sizes and values are withheld)" in alone
    assert not any(mark in alone for mark in rec.HOLDOUT_MARKS[:3])
    # the same kernel failing again (reformatted): both listed, only the later one shown
    twin = failed("a0006", source="__global__ void k()  {}\n", message="case odd: 3 elements differ")
    text = failures_section(task, [hidden, twin], known={})
    assert text.startswith("# Recent failures (do not repeat these mistakes)\n"
                           "- a0005: mismatch: failed (details withheld)\n- a0006: mismatch: case odd: 3 elements differ")
    assert "## a0006" in text and "## a0005" not in text and "Gate: case odd: 3 elements differ" in text
    assert failures_section(task, [], known={}) == ""


def test_a_fix_of_a_derived_attempt_shows_where_it_came_from_and_its_whole_source():
    task = rec.task()
    fix = failed("a0007", reason="compile_error", parent="a0003", direction="unroll k", rationale="fewer loads",
                 compile_log="a0007.cu(1): error: expected a \";\"", defines={"BK": 8})
    text = fix_section(task, fix, known={"a0003": "__global__ void k() { }\n"})
    assert text.startswith("# Fix this failed attempt: a0007\nIt failed with compile_error (")
    assert ("Derived from a0003; run with the task's default launch; defines BK=8.\nIts direction was: unroll k\n"
            "Its rationale: fewer loads\nCompiler errors (line numbers are the file's, shown below):\n"
            "- line 1: expected a \";\"\n      1 | __global__ void k() {}\n") in text
    assert text.endswith("Its complete source:\n```cuda\n__global__ void k() {}\n```")
