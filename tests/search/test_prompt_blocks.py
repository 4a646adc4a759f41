"""kernel_forge.search.prompt_blocks: how a kernel is shown in any prompt section -- its normalised source,
times and settings as text, and a source that is an expert pattern shown above named instead of repeated."""
from __future__ import annotations

from types import SimpleNamespace

from kernel_forge.search.prompt_blocks import (PromptAttempt, defines_text, fence, field_of, normalise, pattern_refs,
                                               per_case, source_block, us)

PATTERN = ("// kforge: tune BLOCK = [128, 256]\n// kforge: constraint BLOCK % 32 == 0\n"
           "__global__ void k(float* y) {\n    y[threadIdx.x] = 0.f;\n}\n")


def test_a_normalised_source_has_no_kforge_lines_and_single_spaces():
    assert normalise("// kforge: define A = 1\nint  x;\n\n  y = 2;\n") == "int x; y = 2;"
    assert normalise("  // kforge: grid = [1]\nint x;") == "int x;"
    assert normalise("int x;  // kforge: after code\n") == "int x; // kforge: after code"   # not a header line
    assert normalise("// note\nint x;") == "// note int x;"              # other comments stay


def test_times_are_written_with_fewer_decimals_as_they_grow_and_settings_in_name_order():
    assert (us(None), us(12.345), us(123.44), us(12345.6)) == ("-", "12.35", "123.4", "12346")
    assert defines_text({"ITEMS": 4, "BLOCK": 256}) == "BLOCK=256 ITEMS=4" and defines_text(None) == ""
    assert fence("x = 1;\n\n", "c") == "```c\nx = 1;\n```"


def test_a_field_is_read_from_a_dict_or_an_object_by_the_first_name_it_has():
    assert field_of({"pattern": "p", "name": "n"}, "name", "pattern") == "n"
    assert field_of(SimpleNamespace(source="s"), "code", "source") == "s"
    assert field_of({}, "x", default=3) == 3 and field_of(SimpleNamespace(), "x") is None


def test_the_per_case_times_leave_out_hidden_and_untimed_cases():
    a = PromptAttempt(id="a1", source="", passed=True, reason="", message="", score_us=1.0, cases=[
        {"name": "small", "role": "performance", "timing": {"median": 5.0}},
        {"name": "odd", "role": "correctness", "timing": None},
        {"name": "hidden", "role": "holdout", "timing": {"median": 9.0}},
        {"name": "large", "role": "performance", "timing": {"median": 1234.5}}])
    assert per_case(a) == "small 5.00, large 1234.5 µs"
    assert per_case(PromptAttempt(id="a2", source="", passed=False, reason="", message="", score_us=None)) == ""


def test_a_kernel_that_is_an_expert_pattern_shown_above_is_named_with_only_its_own_kforge_lines():
    refs = pattern_refs([{"pattern": "elementwise/map.cu", "source": PATTERN}, {"pattern": "", "source": "int x;"},
                         SimpleNamespace(pattern="other.cu", source="")])
    assert list(refs.values()) == [("the expert pattern elementwise/map.cu (under Kernels from the archive above)",
                                    {"// kforge: tune BLOCK = [128, 256]", "// kforge: constraint BLOCK % 32 == 0"})]
    # the pattern with its header moved and one line of its own
    mine = "// kforge: define ITEMS = 4\n" + PATTERN.replace("\n    y", "\n  y")
    block = source_block(mine, refs, 1000, what="The start")
    assert block.startswith("The start is the expert pattern elementwise/map.cu (under Kernels from the archive "
                            "above), line for line")
    assert block.endswith("```cuda\n// kforge: define ITEMS = 4\n```") and "__global__" not in block
    assert source_block(PATTERN, refs, 1000).endswith("```cuda\n// (no other kforge line)\n```")
    # any other kernel is shown whole, clipped to the limit
    other = "__global__ void other() {}\n"
    assert source_block(other, refs, 1000) == "```cuda\n__global__ void other() {}\n```"
