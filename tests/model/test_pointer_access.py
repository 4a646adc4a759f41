"""kernel_forge.model.pointer_access: how a kernel uses each non-const pointer, read from its body
(init's guess of input, output or in/out for a pointer without const)."""
from __future__ import annotations

import pytest

from kernel_forge.model.pointer_access import access

HEAD = "__global__ void k(float* p, int n)\n{\n    int i = threadIdx.x;\n"


@pytest.mark.parametrize("body, want", [
    ("    float v = p[i] * 2.0f;\n    (void)v;\n", "read"),
    ("    p[i] = 1.0f;\n", "write"),
    ("    p[i * 2 + 1] = 0.0f;\n    p[i] = 3.0f;\n", "write"),
    ("    p[i] += 1.0f;\n", "both"),                           # a compound assignment reads too
    ("    p[i] = p[i] * 2.0f;\n", "both"),
    ("    p[i]++;\n", "both"),
    ("    if (p[i] == 0.0f) return;\n", "read"),              # a comparison is no assignment
    ("    atomicAdd(&p[i % 4], 1.0f);\n", "both"),
    ("    atomicAdd(p + i, 1.0f);\n", "both"),
    ("    *p = 1.0f;\n", "write"),
    ("    float v = *(p + i);\n    (void)v;\n", "read"),
    ("    float* q = p + i;\n    q[0] = 1.0f;\n", "unknown"),     # kept in a local pointer: may be written
    ("    helper(p, i);\n", "unknown"),                         # passed on
    ("    reinterpret_cast<float4*>(p)[i] = make_float4(0, 0, 0, 0);\n", "unknown"),
    ("    s.p[i] = 1.0f;\n    float v = my_p[i];\n", "unknown"),  # other names: no use of p at all
])
def test_each_use_of_a_pointer_is_read_as_a_read_a_write_or_unknown(body, want):
    assert access(HEAD + body + "}\n", 1, ["p"]) == {"p": want}


def test_only_the_named_kernels_body_is_read():
    src = ("__global__ void a(float* p) { p[0] = 1.0f; }\n"
           "__global__ void k(float* p, float* q)\n{\n    q[0] = p[0];\n}\n"
           "__global__ void b(float* p) { p[1] = 2.0f; }\n")
    assert access(src, 2, ["p", "q"]) == {"p": "read", "q": "write"}


def test_init_guesses_a_pointer_the_kernel_only_reads_as_an_input_and_one_it_reads_and_writes_as_in_out(tmp_path):
    import json

    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    (tmp_path / "k.cu").write_text("__global__ void scan_step(int* data, unsigned int* counts, int* sums, int n)\n{\n"
                                   "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n"
                                   "    data[i] += (int)counts[i];\n    sums[i] = data[i];\n}\n")
    r = CliRunner().invoke(cli, ["init", "scan_step", "--from", str(tmp_path / "k.cu"), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 0 and "validated" in r.output, r.output
    args = json.loads((tmp_path / "t" / "scan_step.json").read_text())["args"]
    assert args["data"]["output"] is True and "init" in args["data"]           # in/out
    assert "output" not in args["counts"] and "init" in args["counts"]         # only read: an input
    assert args["sums"] == {"shape": ["n"], "output": True}                    # only written
    assert "counts: uint32* counts -> input" in r.output and "not const, but the kernel only reads it" in r.output


def test_init_and_validate_say_when_extern_shared_memory_gets_no_bytes(tmp_path):
    """cuda-samples' shfl_scan sizes its `extern __shared__` array at its <<<>>>, which init does not read:
    init lists the bytes to fill in, and validate warns while the launch gives none."""
    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    (tmp_path / "k.cu").write_text("__global__ void rev(const float* x, float* y, int n)\n{\n"
                                   "    extern __shared__ float tile[];\n    int i = threadIdx.x;\n"
                                   "    tile[i] = x[i];\n    __syncthreads();\n    y[i] = tile[blockDim.x - 1 - i];\n}\n")
    r = CliRunner().invoke(cli, ["init", "rev", "--from", str(tmp_path / "k.cu"), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 0 and "$.launch.shared_mem" in r.output, r.output
    (tmp_path / "t" / "rev_reference.py").write_text("def reference(x, y, n):\n    y[...] = x\n")
    r = CliRunner().invoke(cli, ["validate", str(tmp_path / "t" / "rev.json")])
    assert "rev.cu:3: the kernel declares `extern __shared__` memory" in r.output, r.output
    # an extern "C" kernel with only static shared arrays (FasterTransformer's layernorm, DeepSpeed's
    # column sums) is not warned about
    (tmp_path / "t" / "rev.cu").write_text('extern "C" __global__ void rev(const float* x, float* y, int n)\n{\n'
                                           "    __shared__ float tile[1024];\n    int i = threadIdx.x;\n"
                                           "    tile[i] = x[i];\n    __syncthreads();\n    y[i] = tile[blockDim.x - 1 - i];\n}\n")
    r = CliRunner().invoke(cli, ["validate", str(tmp_path / "t" / "rev.json")])
    assert "extern __shared__" not in r.output, r.output


def test_a_byte_mask_is_drawn_half_true_half_false(tmp_path):
    import json

    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    (tmp_path / "k.cu").write_text("__global__ void fill(const unsigned char* attn_mask, const signed char* ids, float* y, "
                                   "int n)\n{\n    int i = threadIdx.x;\n    if (i < n) y[i] = attn_mask[i] ? 0.0f : ids[i];\n}\n")
    r = CliRunner().invoke(cli, ["init", "fill", "--from", str(tmp_path / "k.cu"), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    args = json.loads((tmp_path / "t" / "fill.json").read_text())["args"]
    assert args["attn_mask"]["init"] == {"kind": "randint", "low": 0, "high": 2}
    assert args["ids"]["init"] == {"kind": "randint", "low": -100, "high": 100}
