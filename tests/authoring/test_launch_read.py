"""kernel_forge/authoring/launch_read.py: the launch a program gives its kernel (``<<<grid, block,
shared>>>``), read over the kernel's own parameters for ``kforge init``; on llm.c's files as published
(tests/data/programs/llmc, MIT) and on small programs written here."""
from __future__ import annotations

import json

import pytest

from kernel_forge.authoring.launch_read import read_launch
from kernel_forge.model.signature import find_entry

from tests.support.paths import ROOT

LLMC = ROOT / "tests" / "data" / "programs" / "llmc"


def _read(text: str, name: str):
    sig, _ = find_entry(text, name)
    return read_launch(text, name, sig.params)


@pytest.mark.parametrize("name, grid, block, shared", [
    ("layernorm_forward_kernel1", ["cdiv(N, 256)"], [256], None),          # ceil_div(N, block_size), N = B * T passed
    ("layernorm_forward_kernel3", ["cdiv(N * 32, 256)"], [256], None),     # a warp a row
    ("layernorm_forward_kernel5", ["N"], [256], None),                     # a block a row
    ("mean_kernel", ["N"], ["block_size"], "block_size * 4"),              # the block size a kernel parameter
    ("layernorm_forward_kernel6", ["cdiv(N, (256 // 32))"], [32, "256 // 32"], "(2 + (256 // 32)) * C * 4"),
])
def test_llm_c_s_layernorm_launches_are_read_over_the_kernel_s_parameters(name, grid, block, shared):
    got = _read((LLMC / "layernorm_forward.cu").read_text(), name)
    assert got is not None and (got.grid, got.block, got.shared_mem) == (grid, block, shared)


def test_an_argument_written_as_an_expression_stands_for_its_parameter_and_a_2d_block_defaults_to_16():
    got = _read((LLMC / "matmul_forward.cu").read_text(), "matmul_forward_kernel1")      # (..., B*T, C, OC)
    assert got.grid == ["cdiv(BT,16)", "cdiv(OC, 16)"] and got.block == [16, 16]
    assert got.defaulted == ("sqrt_block_size",) and got.written == "<<<gridDim, blockDim>>>"


def test_a_value_another_function_gives_a_name_does_not_count():
    """softmax_forward3 sets its own block_size = 32; the launchers after it take theirs from outside."""
    text = (LLMC / "softmax_forward.cu").read_text()
    assert (_read(text, "softmax_forward_kernel3").block, _read(text, "softmax_forward_kernel3").shared_mem) == ([32], "32 * 4")
    assert _read(text, "softmax_forward_kernel4").block == [256]


def test_sizes_the_kernel_is_not_given_leave_the_launch_unread():
    assert _read((LLMC / "matmul_forward.cu").read_text(), "matmul_forward_kernel4") is None   # B, T: not parameters


PROGRAM = """#include <cstdio>
#define BLOCK 128
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
__global__ void scale(float* y, const float* x, int n, int rows) { }
__global__ void other(float* y, int n) { }
void run(float* y, const float* x, int n, int rows, bool flag) {
    unsigned total = (unsigned)n * rows;
    int blocks = CEIL_DIV(total, BLOCK);
    scale<<<blocks, BLOCK, 0>>>(y, x, n, rows);
    other<<<flag ? 1 : 2, 64>>>(y, n);
}
"""


def test_defines_helpers_casts_and_integer_division_are_written_in_the_manifest_s_language():
    got = _read(PROGRAM, "scale")
    assert got.grid == ["cdiv((n * rows), 128)"] and got.block == [128] and got.shared_mem is None
    assert got.line == 9
    assert _read(PROGRAM, "other") is None                      # a conditional: not read


def test_init_writes_the_program_s_launch_and_says_where_it_read_it(tmp_path):
    from kernel_forge.authoring.from_kernel import init_task

    src = tmp_path / "layernorm_forward.cu"
    src.write_text((LLMC / "layernorm_forward.cu").read_text())
    for h in LLMC.glob("*.h"):
        (tmp_path / h.name).write_text(h.read_text())
    result = init_task("layernorm_forward_kernel3", tmp_path / "task", from_file=src, validate=False)
    manifest = json.loads(result.manifest.read_text())
    assert manifest["launch"] == {"grid": ["cdiv(N * 32, 256)"], "block": [256]}
    assert any("read from the program's launch, line 452" in g for g in result.guesses), result.guesses
