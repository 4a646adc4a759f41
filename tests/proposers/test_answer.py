"""kernel_forge.proposers.answer: reading a model's answer (the kernel, its edits, its JSON part)."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.proposers.answer import read_answer

KERNEL = (Path(__file__).resolve().parents[2] / "manifests" / "vector_add.cu").read_text()


def test_a_json_part_nested_100000_deep_is_a_problem_of_the_answer_not_a_crash():
    """A model's ```json block of 100,000 brackets made json recurse past Python's limit: the
    RecursionError left the proposer; now it is the answer's problem, fed back like a syntax error."""
    deep = "[" * 100_000 + "]" * 100_000
    got = read_answer(f"```cuda\n{KERNEL}```\n\n```json\n{deep}\n```\n")
    assert got.problem == "the ```json block is nested more than 100 levels deep at line 1"
    ok = read_answer(f"```cuda\n{KERNEL}```\n\n```json\n{{\"rationale\": \"one thread per element\"}}\n```\n")
    assert ok.problem is None
