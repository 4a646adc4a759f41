"""kernel_forge.proposers.replay: proposals from a folder of kernels or a JSONL of recorded answers."""
from __future__ import annotations

import json

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.proposers.replay import load_proposals

KERNEL = 'extern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n'


def test_a_jsonl_of_proposal_arguments_replays_in_line_order(tmp_path):
    f = tmp_path / "answers.jsonl"
    f.write_text("\n".join(json.dumps({"source": KERNEL + f"// {i}\n", "rationale": f"r{i}"}) for i in range(3)) + "\n")
    props = load_proposals(f)
    assert [p.rationale for p in props] == ["r0", "r1", "r2"]
    assert [p.label for p in props] == ["answers.jsonl:1", "answers.jsonl:2", "answers.jsonl:3"]


def test_a_line_that_is_not_json_is_named_by_file_and_line(tmp_path):
    f = tmp_path / "answers.jsonl"
    f.write_text(json.dumps({"source": KERNEL, "rationale": "ok"}) + "\n{oops\n")
    with pytest.raises(InputError, match=r"answers.jsonl:2: invalid JSON at column 2"):
        load_proposals(f)


def test_a_line_with_no_proposal_is_named_by_file_and_line(tmp_path):
    f = tmp_path / "answers.jsonl"
    f.write_text('\n{"response": {}}\n')
    with pytest.raises(InputError, match=r"answers.jsonl:2: no proposal in this record"):
        load_proposals(f)


def test_a_file_with_only_blank_lines_has_no_proposals(tmp_path):
    f = tmp_path / "answers.jsonl"
    f.write_text("\n\n")
    with pytest.raises(InputError, match=r"answers.jsonl: no proposals in it"):
        load_proposals(f)
