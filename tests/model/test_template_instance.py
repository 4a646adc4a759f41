"""Template kernels run as the instance a ``// kforge: instance`` line names (model/template_instance.py):
the signature read as that instance, the compile NVRTC gets (the template a device function on its own
lines, one C-linkage kernel of the template's name calling it), and what is refused, with what to write."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.common.errors import CandidateError, SignatureError
from kernel_forge.gpu.nvrtc import compile_source
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.signature import as_compiled, find_entry
from kernel_forge.model.template_instance import instantiated, split_top, template_params

from tests.support.template_kernels import RMS


def test_the_signature_is_the_instances_with_defaults_filled_in_and_the_definitions_line():
    sig, line = find_entry(RMS, "rms_norm_kernel")
    assert line == 10                                  # the definition, not the declaration on line 6
    assert [(p.name, p.dtype.name, p.pointer, p.const) for p in sig.params] == [
        ("out", "float16", True, False), ("input", "float16", True, True),
        ("epsilon", "float32", False, False), ("hidden_size", "int32", False, False)]


def test_the_compiled_source_keeps_every_line_and_adds_one_c_linkage_kernel_calling_the_instance():
    out = instantiated(RMS)
    before, after = RMS.splitlines(), out.splitlines()
    assert len(after) == len(before) + 1                   # the lines the user's errors name stay theirs
    for i, (a, b) in enumerate(zip(before, after)):
        if "rms_norm_kernel" not in a and "__launch_bounds__" not in a:
            assert a == b, f"line {i + 1} changed"
    assert after[5].startswith("__device__ __forceinline__ void rms_norm_kernel__kf_template")   # the declaration too
    assert after[9] == "__device__ __forceinline__ void rms_norm_kernel__kf_template"
    assert after[-1] == ('extern "C" __global__ void __launch_bounds__(BLOCK) rms_norm_kernel(__half* __restrict__ out, '
                         "const __half* __restrict__ input, const float epsilon, const int hidden_size) { "
                         "rms_norm_kernel__kf_template<__half, BLOCK>(out, input, epsilon, hidden_size); }")
    assert "__global__" not in "\n".join(after[:-1]).replace("// kforge", "")
    assert as_compiled(RMS) == out                         # the added kernel already has C linkage


@pytest.mark.parametrize("block", [64, 256])
def test_nvrtc_compiles_the_instance_with_its_launch_bounds_under_the_name_written(block):
    ptx = compile_source(RMS, arch="sm_90", defines={"BLOCK": block}, use_cache=False).ptx
    assert re.findall(r"\.entry (\w+)", ptx) == ["rms_norm_kernel"]
    assert re.search(r"\.maxntid (\d+), 1, 1", ptx).group(1) == str(block)
    assert len(re.findall(r"\.param \.\w+ rms_norm_kernel_param_\d+", ptx)) == 4


def test_an_error_in_the_template_names_the_users_line():
    broken = RMS.replace("v += x * x;", "v += x * undefined_name;")
    with pytest.raises(Exception) as info:
        compile_source(broken, arch="sm_90", defines={"BLOCK": 128}, use_cache=False)
    line = next(i + 1 for i, t in enumerate(broken.splitlines()) if "undefined_name" in t)
    assert f"line {line}:" in str(info.value) and "undefined_name" in str(info.value)
    with pytest.raises(Exception) as info:     # the line shown is the one the user wrote, not the compiled rewrite
        compile_source(RMS.replace("rms_norm_kernel(scalar_t* __restrict__ out", "rms_norm_kernel(scalar_tt* __restrict__ out"),
                       arch="sm_90", defines={"BLOCK": 128}, use_cache=False)
    assert "| __global__ void rms_norm_kernel(scalar_tt* __restrict__ out" in str(info.value)
    assert "__kf_template" not in str(info.value)


def test_an_instance_line_that_does_not_fit_fails_the_compile_naming_the_file_and_line_and_nothing_is_written(tmp_path):
    k = tmp_path / "k.cu"
    k.write_text("// kforge: grid = [1]\n// kforge: block = [32]\n" + RMS.replace("<__half, BLOCK>", "<__half, 64, true, 1>"))
    before = k.read_bytes()
    r = CliRunner().invoke(cli, ["compile", str(k), "--arch", "sm_90"])
    assert r.exit_code == 2 and r.output.startswith("kforge: error: k.cu: line 4: instance rms_norm_kernel<")
    assert "gives 4 arguments" in r.output and "Traceback" not in r.output and k.read_bytes() == before
    # no instance line at all: the compile makes no kernel, and says why
    k.write_text("// kforge: grid = [1]\n// kforge: block = [32]\n"
                 + RMS.replace("// kforge: instance rms_norm_kernel<__half, BLOCK>\n", "\n"))
    r = CliRunner().invoke(cli, ["compile", str(k), "--arch", "sm_90"])
    assert r.exit_code == 0 and "no kernel was compiled: template kernel rms_norm_kernel runs as one instance" in r.output


def test_a_template_with_no_instance_line_is_refused_with_the_line_to_add():
    src = RMS.replace("// kforge: instance rms_norm_kernel<__half, BLOCK>\n", "\n")
    with pytest.raises(SignatureError) as info:
        find_entry(src, "rms_norm_kernel")
    assert "is a template: the task runs one instance of it" in str(info.value)
    assert info.value.hint == "add a line `// kforge: instance rms_norm_kernel<float, ..., false>` to the kernel file"
    assert instantiated(src) == src                        # nothing named: compiled as written (NVRTC finds no entry)


@pytest.mark.parametrize("line, message", [
    ("rms_norm_kernel<float, 128, true, 9>", "gives 4 arguments; the template takes 3"),
    ("rms_norm_kernel<float>", "leaves out 'int THREADS', which has no default"),
])
def test_instance_arguments_that_do_not_fit_the_template_are_refused(line, message):
    src = RMS.replace("rms_norm_kernel<__half, BLOCK>", line)
    with pytest.raises(SignatureError) as info:
        find_entry(src, "rms_norm_kernel")
    assert message in str(info.value) and str(info.value).startswith("line 2: instance ")


def test_two_instances_of_one_kernel_and_a_malformed_line_are_refused_with_their_lines():
    with pytest.raises(SignatureError, match="line 3: a second instance of rms_norm_kernel"):
        find_entry(RMS.replace("\n", "\n// kforge: instance rms_norm_kernel<float, 32>\n", 2), "rms_norm_kernel")
    bad = RMS.replace("rms_norm_kernel<__half, BLOCK>", "rms_norm_kernel(float)")
    with pytest.raises(CandidateError) as info:
        parse_candidate(bad, name="k.cu")
    assert info.value.line == 2 and "instance KERNEL<ARGUMENTS>" in str(info.value)


def test_a_candidate_keeps_its_instance_line_where_it_stands_when_rendered():
    cand = parse_candidate("// kforge: tune BLOCK = [64, 128]\n" + RMS, name="k.cu")
    rendered = cand.with_defines({"BLOCK": 128}).render()
    assert "// kforge: instance rms_norm_kernel<__half, BLOCK>" in rendered
    assert find_entry(rendered, "rms_norm_kernel")[0] == find_entry(RMS, "rms_norm_kernel")[0]


def test_template_parameters_and_top_level_commas():
    assert split_top("a<b, c>, d(e, f), g") == ["a<b, c>", "d(e, f)", "g"]
    params = template_params("template <typename T, int N = (4, 2), class U = pair<int, int>, bool B>")
    assert [(p.name, p.is_type, p.default) for p in params] == [
        ("T", True, None), ("N", False, "(4, 2)"), ("U", True, "pair<int, int>"), ("B", False, None)]
    with pytest.raises(SignatureError, match="pack"):
        template_params("template <typename... Ts>")


def test_init_from_a_template_writes_its_instance_and_the_task_validates(tmp_path):
    src = tmp_path / "ops.cu"
    src.write_text(RMS.replace("// kforge: instance rms_norm_kernel<__half, BLOCK>\n", "\n")
                   .replace("int THREADS,", "int THREADS = 256,", 1))         # defaults on the declaration
    r = CliRunner().invoke(cli, ["init", "rms_norm_kernel", "--from", str(src), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    kernel = (tmp_path / "t" / "rms_norm_kernel.cu").read_text()
    assert kernel.splitlines()[-1] == "// kforge: instance rms_norm_kernel<float, 256, false>"
    assert "instance: `// kforge: instance rms_norm_kernel<float, 256, false>` added" in r.output
    assert "validated" in r.output
    # the user's own file, in place, is never written: asked for the line instead
    r = CliRunner().invoke(cli, ["init", "ops", "--from", str(src), "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "no kernel named 'ops'" in r.output
    inplace = tmp_path / "rms_norm_kernel.cu"
    inplace.write_text(src.read_text())
    r = CliRunner().invoke(cli, ["init", "rms_norm_kernel", "--from", str(inplace), "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "add the line `// kforge: instance rms_norm_kernel<float, 256, false>`" in r.output
    assert inplace.read_text() == src.read_text() and not (tmp_path / "rms_norm_kernel.json").exists()


def test_a_template_inside_namespaces_is_called_by_its_qualified_name_and_its_own_types_stay_its_own():
    src = ("namespace {\nstruct Skip {};\n}\nnamespace ops { namespace detail { typedef float real_t; } }\n"
           "namespace ops::detail {\n// kforge: instance scale<2>\ntemplate <int K>\n"
           "__global__ void scale(real_t* y, const real_t* x, int n)\n"
           "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = K * x[i];\n}\n}  // namespace\n")
    sig, line = find_entry(src, "scale")
    assert line == 8 and [p.dtype.name for p in sig.params] == ["float32", "float32", "int32"]
    added = instantiated(src).splitlines()[-1]
    assert instantiated(src).splitlines()[-2] == ("namespace ops::detail { __device__ __forceinline__ void "
                                                 "scale__kf_instance(real_t* y, const real_t* x, int n) { scale__kf_template<2>(y, x, n); } }")
    assert added == ('extern "C" __global__ void scale(ops::detail::real_t* y, const ops::detail::real_t* x, int n) '
                     "{ ops::detail::scale__kf_instance(y, x, n); }")
    ptx = compile_source(src, arch="sm_90", use_cache=False).ptx
    assert re.findall(r"\.entry (\w+)", ptx) == ["scale"]


ACT = """// kforge: instance act_and_mul_kernel<__half, silu_kernel<__half>, true>
#include "act_and_mul_kernel.compat.h"
namespace vllm {
template <typename T>
__device__ __forceinline__ T silu_kernel(const T& x) { return (T)(((float)x) / (1.0f + expf((float)-x))); }

template <typename scalar_t, scalar_t (*ACT_FN)(const scalar_t&), bool act_first>
__global__ void act_and_mul_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input, const int d)
{
    const int64_t t = blockIdx.x;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        const scalar_t x = LDG(&input[t * 2 * d + i]), y = LDG(&input[t * 2 * d + d + i]);
        out[t * d + i] = act_first ? ACT_FN(x) * y : x * ACT_FN(y);
    }
}
}  // namespace vllm
"""


def test_a_function_as_a_template_argument_named_as_inside_the_namespace_compiles_in_half_precision():
    """vLLM's act_and_mul_kernel<scalar_t, ACT_FN, act_first>: a function pointer among the template's
    parameters, its argument named as the namespace sees it, __half named only by the instance, and the
    kernel's name inside a project header's path (left as written)."""
    params = template_params("template <typename scalar_t, scalar_t (*ACT_FN)(const scalar_t&), bool act_first>")
    assert [(p.name, p.is_type) for p in params] == [("scalar_t", True), ("ACT_FN", False), ("act_first", False)]
    sig, _ = find_entry(ACT, "act_and_mul_kernel")
    assert [p.dtype.name for p in sig.params] == ["float16", "float16", "int32"]
    out = instantiated(ACT)
    assert out.splitlines()[1] == '#include "act_and_mul_kernel.compat.h"'
    assert out.splitlines()[-3] == "#include <cuda_fp16.h>"
    headers = {"act_and_mul_kernel.compat.h": "#pragma once\n#define LDG(p) __ldg(p)\n"}
    ptx = compile_source(ACT, arch="sm_90", use_cache=False, headers=headers).ptx
    assert re.findall(r"\.entry (\w+)", ptx) == ["act_and_mul_kernel"]
    assert "ex2.approx" in ptx                          # silu's expf, inlined: the instance's own code
