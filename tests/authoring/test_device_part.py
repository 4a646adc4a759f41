"""kernel_forge/authoring/device_part.py: a kernel brought inside its program (a CPU reference, a
launcher, main, host headers) keeps its device part, line for line, and compiles under NVRTC."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.authoring.device_part import device_part
from kernel_forge.model.signature import find_entry
from kernel_forge.model.task import load_task

PROGRAM = """/* row scaling, written as a course's exercise ships it: one file, host and device */
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include "common.h"
#define BLOCK 256
const int WARP = 32;
__constant__ float kScale[4];
struct Pair { float a, b; };
typedef float real;
float* d_buffer;                                   // a host global
void launch_all(float* y, const float* x, int n);  // a host prototype

// the CPU reference
void scale_cpu(float* y, const float* x, int n) {
    for (int i = 0; i < n; i++) { y[i] = x[i] * 2.0f; }
}

__device__ __forceinline__ real twice(real v) { return 2.0f * v; }
template <typename T> __device__ T halve(T v) { return v / (T)2; }

__global__ void scale_naive(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { Pair p = {x[i], kScale[0]}; y[i] = twice(p.a) + 0.0f * halve(p.b) * WARP; }
}

__global__ void scale_other(float* y, const float* x, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = x[i];
}

void launch_all(float* y, const float* x, int n) {
    scale_naive<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(y, x, n);
    scale_other<<<(n + BLOCK - 1) / BLOCK, BLOCK>>>(y, x, n);
}

int main(int argc, char** argv) {
    int n = 1 << 20;
    cudaMalloc(&d_buffer, n * sizeof(float));
    printf("%d\\n", n);
    return 0;
}
"""


def test_the_device_part_keeps_the_kernel_and_what_it_needs_line_for_line():
    part = device_part(PROGRAM, "scale_naive")
    kept, lines = part.source.splitlines(), PROGRAM.splitlines()
    assert len(kept) == len(lines)
    for i, line in enumerate(lines):                   # each line kept whole, or its code blanked (a comment may stay)
        assert kept[i] == line.rstrip() or kept[i].strip() in ("", line[line.find("//"):].strip()), (i + 1, line)
    text = part.source
    for needed in ("#include <cuda_fp16.h>", "#define BLOCK 256", "const int WARP = 32;", "__constant__ float kScale[4];",
                   "struct Pair { float a, b; };", "typedef float real;", "real twice(real v)", "T halve(T v)",
                   "__global__ void scale_naive("):
        assert needed in text, needed
    for gone in ("stdio.h", "stdlib.h", "cuda_runtime.h", "common.h", "d_buffer", "launch_all", "scale_cpu", "main",
                 "scale_other", "<<<", "printf"):
        assert gone not in text, gone
    assert part.dropped == ["scale_cpu", "kernel scale_other", "launch_all", "main"]
    assert part.includes == ["#include <stdio.h>", "#include <stdlib.h>", "#include <cuda_runtime.h>",
                             '#include "common.h"']
    assert find_entry(part.source, "scale_naive")[1] == find_entry(PROGRAM, "scale_naive")[1] == 23
    assert device_part(PROGRAM, None).changed and not device_part(part.source, None).changed   # all kernels kept


def test_the_device_part_compiles_under_nvrtc_to_the_one_kernel():
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.gpu.nvrtc import compile_source

    res = compile_source(device_part(PROGRAM, "scale_naive").source, arch="sm_90", use_cache=False)
    assert re.findall(r"^\.visible \.entry (\w+)\(", res.ptx, re.M) == ["scale_naive"]


def test_init_from_a_program_writes_its_device_part_beside_it_and_never_over_it(tmp_path):
    src = tmp_path / "scale_naive.cu"
    src.write_text(PROGRAM)
    r = CliRunner().invoke(cli, ["init", "scale_naive", "--from", str(src), "--dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert src.read_text() == PROGRAM                                      # the user's program as it was
    device = tmp_path / "scale_naive.device.cu"
    assert device.read_text().rstrip("\n") == device_part(PROGRAM, "scale_naive").source.rstrip("\n")
    assert "scale_naive.cu is a program: scale_naive.device.cu keeps the device part of it" in r.output
    assert "left out scale_cpu, kernel scale_other, launch_all, main" in r.output
    assert load_task(tmp_path / "scale_naive.json").initial == device.resolve()


COMMON = """// a project's shared header: host helpers beside the device ones
#include <stdio.h>
#include <cuda_runtime.h>
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#else
typedef float floatX;
#endif
void cuda_check(cudaError_t error, const char* file, int line) {
    if (error != cudaSuccess) { printf("%s:%d\\n", file, line); exit(1); }
}
#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
int num_sms = 0;
"""
BF16_PROGRAM = """#include <stdio.h>
#include <cuda_runtime.h>
#define ENABLE_BF16
#include "common.h"

__global__ void row_sum(floatX* out, const floatX* inp, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    float s = 0.0f;
    for (int i = threadIdx.x % 32; i < C; i += 32) s += (float)inp[row * C + i];
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0) out[row] = (floatX)s;
}

int main() {
    cudaCheck(cudaDeviceSynchronize());
    return 0;
}
"""


def test_init_from_a_program_with_a_project_header_reads_its_types_and_writes_its_device_part(tmp_path):
    """llm.c's layout: `#define ENABLE_BF16` before `#include "common.h"`, whose floatX is then bf16:
    the manifest declares bf16, the header's device part is written as NAME.common.h, the include
    line points at it, and the manifest lists it; the task validates (NVRTC compiles it)."""
    (tmp_path / "common.h").write_text(COMMON)
    (tmp_path / "rows.cu").write_text(BF16_PROGRAM)
    out = tmp_path / "task"
    r = CliRunner().invoke(cli, ["init", "row_sum", "--from", str(tmp_path / "rows.cu"), "--dir", str(out)])
    assert r.exit_code == 0, r.output
    task = load_task(out / "row_sum.json")
    assert task.signature.text == "__global__ void row_sum(__nv_bfloat16* out, const __nv_bfloat16* inp, int N, int C)"
    assert task.raw["headers"] == ["row_sum.common.h"]
    kernel, header = (out / "row_sum.cu").read_text(), (out / "row_sum.common.h").read_text()
    assert kernel.splitlines()[3] == '#include "row_sum.common.h"' and "main" not in kernel
    assert "#include <cuda_bf16.h>" in header.splitlines()[1:3]     # what cuda_runtime.h brought under nvcc
    assert "__device__ float warp_sum" in header and "typedef __nv_bfloat16 floatX;" in header
    assert "cuda_check(cudaError_t" not in header and "num_sms" not in header and "stdio" not in header
    assert "header: row_sum.common.h is the device part of common.h" in r.output
    assert "validated: the manifest, its files and the kernel are consistent" in r.output, r.output


LLMC = Path(__file__).resolve().parents[1] / "data" / "programs" / "llmc"     # llm.c's dev/cuda, MIT: SOURCES.md


@pytest.mark.parametrize("program, kernel, storage", [
    ("layernorm_forward", "layernorm_forward_kernel1", "float32"), ("layernorm_forward", "layernorm_forward_kernel3", "float32"),
    ("softmax_forward", "softmax_forward_kernel1", "float32"), ("softmax_forward", "softmax_forward_kernel4", "float32"),
    ("gelu_forward", "gelu_forward_kernel1", "bfloat16"), ("gelu_forward", "gelu_forward_kernel2", "bfloat16"),
    ("encoder_forward", "encoder_forward_kernel3", "bfloat16"), ("residual_forward", "residual_forward_kernel2", "bfloat16"),
    ("adamw", "adamw_kernel2", "float32"), ("crossentropy_forward", "crossentropy_forward_kernel1", "float32"),
    ("matmul_forward", "matmul_forward_kernel1", "float32"),
])
def test_llm_c_s_kernels_are_set_up_from_their_programs_as_published(tmp_path, program, kernel, storage):
    """Each of llm.c's dev/cuda files is a program (a CPU reference, launchers, main, cuBLAS, `#include
    "common.h"`, floatX chosen by `#define ENABLE_BF16`): init writes the kernel's device part and
    common.h's, the manifest declares the storage the file's floatX is, and NVRTC compiles the kernel."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from kernel_forge.authoring.from_kernel import init_task

    result = init_task(kernel, tmp_path, from_file=LLMC / f"{program}.cu")
    assert result.valid, result.status
    assert any(g.startswith(f"kernel: {program}.cu is a program") for g in result.guesses)
    task = load_task(result.manifest)
    assert task.raw["headers"] == [f"{kernel}.common.h"]
    assert task.signature.params[0].dtype.name == storage
    assert "int main(" not in (tmp_path / f"{kernel}.cu").read_text()


VLLM = Path(__file__).resolve().parents[1] / "data" / "programs" / "vllm" / "layernorm_kernels.cu"

VLLM_REFERENCE = """import numpy as np


def reference(out, input, input_stride, weight, epsilon, num_tokens, hidden_size):
    x = input.reshape(num_tokens, input_stride)[:, :hidden_size].astype(np.float64)
    r = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + epsilon)
    out[...] = (x * r * weight).reshape(out.shape)
"""


def test_vllms_template_rms_norm_in_its_namespace_is_set_up_from_the_file_as_published(tmp_path):
    """vLLM's csrc/layernorm_kernels.cu (Apache-2.0, unchanged): a __global__ template in `namespace vllm`,
    CUB's umbrella header, torch launchers and a launcher macro.  init keeps the kernel, writes its instance,
    includes CUB's block_reduce in place of <cub/cub.cuh> (NVRTC refuses the umbrella), and the task, once
    filled in, is identified as an RMS norm over strided rows and bound."""
    from kernel_forge.kinds import identify
    from kernel_forge.kinds.bind import instantiate
    from kernel_forge.gpu.nvrtc import compile_source

    r = CliRunner().invoke(cli, ["init", "rms_norm_kernel", "--from", str(VLLM), "--dir", str(tmp_path)])
    assert r.exit_code == 0 and "validated" in r.output, r.output
    assert ("left out kernel fused_add_rms_norm_kernel, rms_norm, macro LAUNCH_FUSED_ADD_RMS_NORM, fused_add_rms_norm;"
            in r.output) and "included <cub/cub.cuh> as <cub/block/block_reduce.cuh>" in r.output
    kernel = (tmp_path / "rms_norm_kernel.cu").read_text()
    src = VLLM.read_text().splitlines()
    assert len(kernel.splitlines()) == len(src) + 1 and kernel.splitlines()[-1] == "// kforge: instance rms_norm_kernel<float>"
    assert kernel.splitlines()[7] == "  #include <cub/block/block_reduce.cuh>"
    assert "fused_add_rms_norm_kernel(" not in kernel and "torch::Tensor" not in kernel
    for i, line in enumerate(src[18:47]):                       # the kernel itself, line for line
        assert kernel.splitlines()[18 + i] == line
    manifest = tmp_path / "rms_norm_kernel.json"
    m = __import__("json").loads(manifest.read_text())
    m["args"].update(out={"shape": ["num_tokens", "hidden_size"], "output": True},
                     input={"shape": ["num_tokens", "input_stride"], "init": "normal"},
                     weight={"shape": ["hidden_size"], "init": "normal"}, epsilon=1e-6)
    m["launch"] = {"grid": ["num_tokens"], "block": ["min(hidden_size, 1024)"]}
    m["tolerance"] = {"atol": 1e-4, "rtol": 1e-4}
    m["cost"] = {"bytes": "4 * num_tokens * (2 * hidden_size) + 4 * hidden_size"}
    m["cases"] = [{"name": "small", "role": "correctness", "vars": {"num_tokens": 7, "hidden_size": 40, "input_stride": 48}},
                  {"name": "big", "role": "performance", "vars": {"num_tokens": 4096, "hidden_size": 4096, "input_stride": 4096}},
                  {"name": "odd", "role": "holdout", "vars": {"num_tokens": 33, "hidden_size": 999, "input_stride": 1003}}]
    manifest.write_text(__import__("json").dumps(m, indent=2))
    (tmp_path / "rms_norm_kernel_reference.py").write_text(VLLM_REFERENCE)
    r = CliRunner().invoke(cli, ["validate", str(manifest)])
    assert r.exit_code == 0, r.output
    task = load_task(manifest)
    found = identify(task)
    assert found.match is not None and found.match.kind == "row_norm", found
    assert found.match.binding.get("ldx") == "input_stride" and found.match.params == {"norm": "rms"}
    bound = instantiate(task, found.match)
    assert bound
    for b in bound:
        compile_source(b.source, arch="sm_90", defines=__import__("kernel_forge.model.candidate", fromlist=["x"])
                       .parse_candidate(b.source).compile_defines())


EXLLAMA = Path(__file__).resolve().parents[1] / "data" / "programs" / "exllamav2"       # MIT: SOURCES.md

EXLLAMA_REFERENCES = {
    "rms_norm": """import numpy as np


def reference(x, w, y, epsilon, r_dim, rows, dim, add_residual, input_fp32, output_fp32):
    xf = np.clip(x.astype(np.float32), -65504, 65504)
    y[...] = xf * w / np.sqrt((xf * xf).sum(axis=1, keepdims=True) * r_dim + epsilon)
""",
    "layer_norm": """import numpy as np


def reference(x, w, b, y, epsilon, r_dim, rows, dim, add_residual):
    xf = x.astype(np.float32)
    c = xf - xf.sum(axis=1, keepdims=True) * r_dim
    y[...] = c / np.sqrt((c * c).sum(axis=1, keepdims=True) * r_dim + epsilon) * w + b
"""}


@pytest.mark.parametrize("norm, kind, untyped", [("rms_norm", "rms", ("x", "y")), ("layer_norm", "layer", ())])
def test_exllamav2s_template_norms_with_void_pointers_are_set_up_from_the_files_as_published(tmp_path, norm, kind, untyped):
    """exllamav2's rms_norm.cu and layer_norm.cu (MIT, unchanged, with their four project headers): a
    template whose only parameter has no default (init asks for the instance, naming the line to add), and,
    in the RMS norm, `void*` input and output cast inside behind `bool` flags.  With the instance line
    added, init writes the task with each void* as the type the kernel first casts it to, and the
    task, filled in, is identified as the norm it is and bound, its bound pattern compiling."""
    import shutil

    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.kinds import identify
    from kernel_forge.kinds.bind import instantiate
    from kernel_forge.model.candidate import parse_candidate

    src = tmp_path / "src"
    shutil.copytree(EXLLAMA, src)
    r = CliRunner().invoke(cli, ["init", f"{norm}_kernel", "--from", str(src / f"{norm}.cu"), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 2 and f"add a line `// kforge: instance {norm}_kernel<...>`" in r.output, r.output
    assert not (tmp_path / "t").exists()
    (src / f"{norm}.cu").write_text((src / f"{norm}.cu").read_text() + f"// kforge: instance {norm}_kernel<2>\n")
    r = CliRunner().invoke(cli, ["init", f"{norm}_kernel", "--from", str(src / f"{norm}.cu"), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 0 and "validated" in r.output, r.output
    for name in untyped:
        assert f"guessed: {name}: void* -> __half (the kernel's cast `(half*){name}`" in r.output
        assert f"it also reads {name} as float: the manifest's flags must pick the __half path" in r.output
    manifest = tmp_path / "t" / f"{norm}_kernel.json"
    m = __import__("json").loads(manifest.read_text())
    assert ("const __half* __restrict__ x" if untyped else "const half* __restrict__ x") in m["signature"]
    assert "void" not in m["signature"].split("(", 1)[1]
    assert ("const void* __restrict__ x" in (tmp_path / "t" / f"{norm}_kernel.cu").read_text()) == bool(untyped)
    m["args"].update(x={"shape": ["rows", "dim"], "init": "normal"}, w={"shape": ["dim"], "init": "normal"},
                     y={"shape": ["rows", "dim"], "output": True}, epsilon=1e-6, r_dim="1.0 / dim")
    if norm == "layer_norm":
        m["args"]["b"] = {"shape": ["dim"], "init": "normal"}
    m["launch"] = {"grid": ["rows"], "block": [1024]}
    m["cases"] = [{"name": "small", "role": "correctness", "vars": {"rows": 7, "dim": 256}},
                  {"name": "large", "role": "performance", "vars": {"rows": 4096, "dim": 4096}},
                  {"name": "odd", "role": "holdout", "vars": {"rows": 33, "dim": 1000}}]
    m["tolerance"] = {"atol": 2e-2, "rtol": 1e-2}
    manifest.write_text(__import__("json").dumps(m, indent=2))
    (tmp_path / "t" / f"{norm}_kernel_reference.py").write_text(EXLLAMA_REFERENCES[norm])
    r = CliRunner().invoke(cli, ["validate", str(manifest)])
    assert r.exit_code == 0 and "kind: row_norm" in r.output, r.output
    task = load_task(manifest)
    found = identify(task)
    assert found.match is not None and found.match.params == {"norm": kind}
    assert (found.match.binding["x"], found.match.binding["weight"], found.match.binding["eps"]) == ("x", "w", "epsilon")
    bound = instantiate(task, found.match)
    assert bound
    for b in bound:
        compile_source(b.source, arch="sm_90", defines=parse_candidate(b.source).compile_defines())
