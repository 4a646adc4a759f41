"""kernel_forge/model/dispatch_variants.py: a dispatch rule as the variants and case groups the gate runs."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.model.candidate import load_candidate, parse_candidate
from kernel_forge.model.dispatch_variants import plan, variant, variants
from kernel_forge.model.task import load_task

from tests.support.dispatch_kernels import HEAD, KERNEL

ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = load_task(ROOT / "manifests" / "vector_add.json")       # cases n = 1000003, 37, 16M, 64M, 3145745

#: three lines, the first and the last with one setting
THREE = """// kforge: dispatch n >= 67108864 -> BLOCK=512
// kforge: dispatch n >= 16777216 -> BLOCK=128, ITEMS=2
// kforge: dispatch default -> BLOCK=512
"""


def kernel(rule: str) -> str:
    return HEAD + rule + KERNEL


def test_a_rule_compiles_once_per_distinct_setting():
    cand = parse_candidate(kernel(THREE), name="k.cu")
    got = variants([cand])
    assert [v.defines for v in got] == [{"BLOCK": 512, "ITEMS": 1}, {"BLOCK": 128, "ITEMS": 2}]
    assert all(v.dispatch is None and v.source == cand.source for v in got)
    assert len({v.sha256 for v in got}) == 2


def test_a_kernel_without_a_rule_is_unchanged():
    cand = load_candidate(ROOT / "kernel_forge/kernels/elementwise/vector_add_vec4.cu")
    assert cand.dispatch is None and "dispatch" not in cand.render()
    assert variants([cand]) == [cand]


def test_variants_keep_the_order_of_the_candidates_expanding_only_those_with_a_rule():
    plain = parse_candidate(kernel(""), name="plain.cu")
    ruled = parse_candidate(kernel(THREE), name="ruled.cu")
    assert [(v.name, v.defines) for v in variants([plain, ruled, plain])] == [
        ("plain.cu", plain.defines), ("ruled.cu", {"BLOCK": 512, "ITEMS": 1}), ("ruled.cu", {"BLOCK": 128, "ITEMS": 2}),
        ("plain.cu", plain.defines)]


def test_a_variant_is_the_candidate_with_one_setting_and_no_rule():
    ruled = parse_candidate(kernel(THREE), name="ruled.cu")
    setting = {"BLOCK": 128, "ITEMS": 2}
    v = variant(ruled, setting)
    assert v.dispatch is None and v.defines == setting and v.defines is not setting
    assert (v.source, v.launch, v.tunables) == (ruled.source, ruled.launch, ruled.tunables)


def test_the_plan_groups_cases_by_setting_in_the_order_of_their_first_case():
    cand = parse_candidate(kernel(THREE), name="k.cu")
    picks, groups = plan(VECTOR_ADD, cand, VECTOR_ADD.cases)
    # n: odd 1000003 and holdout 3145745 take the default, n16M the second line, n64M the first
    assert picks == {"odd": 2, "tiny": 2, "n16M": 1, "n64M": 0, "holdout": 2}
    # the first and the last line share a setting: one group, one compile
    assert groups == [({"BLOCK": 512, "ITEMS": 1}, ["odd", "tiny", "n64M", "holdout"]),
                      ({"BLOCK": 128, "ITEMS": 2}, ["n16M"])]
    _, only_large = plan(VECTOR_ADD, cand, [VECTOR_ADD.case("n16M"), VECTOR_ADD.case("odd")])
    assert [cases for _, cases in only_large] == [["n16M"], ["odd"]]
