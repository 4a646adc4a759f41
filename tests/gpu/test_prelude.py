"""nvcc's implicit names under NVRTC (kernel_forge/gpu/prelude.py): kernels written for nvcc use
INFINITY, M_PI, FLT_MAX, int64_t and math_constants.h's CUDART_* without an include; the prelude,
pre-included from memory, supplies them without moving the kernel's line numbers, a kernel that
defines them itself still compiles without a warning, and a name it cannot supply gets a hint.
NVRTC compiles here (no GPU needed)."""
from __future__ import annotations

import re

import pytest

from kernel_forge.common.errors import CompileError
from kernel_forge.gpu import prelude
from kernel_forge.gpu.nvrtc import compile_source


def compile_(src: str):
    return compile_source(src, arch="sm_90", use_cache=False, file_label="wild.cu")


def test_a_softmax_written_for_nvcc_with_infinity_and_math_constants_compiles_as_it_is():
    src = """extern "C" __global__ void softmax(float* out, const float* inp, int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float maxval = -INFINITY;
    for (int j = 0; j < C; j++) maxval = fmaxf(maxval, inp[i * C + j]);
    float s = 0.0f;
    for (int j = 0; j < C; j++) s += expf(inp[i * C + j] - maxval);
    for (int j = 0; j < C; j++) out[i * C + j] = expf(inp[i * C + j] - maxval) / s * (float)(M_PI / M_PI)
        + 0.0f * (FLT_MAX - FLT_MAX) + 0.0f * (float)(M_SQRT2 + M_E + M_LN2) * (CUDART_INF_F > HUGE_VALF);
    int64_t big = INT_MAX; uint32_t u = UINT32_MAX; size_t z = sizeof(uint8_t);
    if (big + u + z == 0 && isnan(NAN) && DBL_MAX > FLT_MIN) out[0] = CUDART_PI_F;
}
"""
    res = compile_(src)
    assert "warning" not in res.log.lower() and res.cubin


def test_a_kernel_that_defines_the_names_itself_still_compiles_without_a_warning():
    src = """#define INFINITY (1.0f / 0.0f)
#define M_PI 3.14159265f
typedef long long my_i64;
typedef int int32_t;
extern "C" __global__ void k(float* x) { x[0] = INFINITY + M_PI; }
"""
    res = compile_(src)
    assert "warning" not in res.log.lower() and "redefinition" not in res.log


def test_line_numbers_in_an_error_are_the_kernels_own():
    src = 'extern "C" __global__ void k(float* x)\n{\n    x[0] = M_PI;\n    x[1] = not_declared_here;\n}\n'
    with pytest.raises(CompileError) as info:
        compile_(src)
    assert info.value.lines == (4,) and "line 4" in str(info.value)


@pytest.mark.parametrize("name, words", [("__nv_bfloat16", "#include <cuda_bf16.h>"),
                                         ("WARP_SIZE", "#define WARP_SIZE VALUE"),
                                         ("MY_CONSTANT", "define it in the kernel"),
                                         ("cub", "<cub/block/block_reduce.cuh>")])
def test_an_undefined_name_the_prelude_cannot_supply_gets_a_hint_saying_what_to_add(name, words):
    src = f'extern "C" __global__ void k(float* x)\n{{\n    x[0] = (float)sizeof({name});\n}}\n'
    with pytest.raises(CompileError) as info:
        compile_(src)
    assert info.value.hint is not None and words in info.value.hint and name in info.value.hint
    assert words in str(info.value)           # the CLI prints the hint under the message


def test_the_prelude_guards_every_macro_and_its_name_changes_with_its_text():
    macros = re.findall(r"^#define (\w+)", prelude.PRELUDE, re.M)
    guarded = re.findall(r"^#ifndef (\w+)", prelude.PRELUDE, re.M)
    assert macros == guarded and {"INFINITY", "NAN", "M_PI", "FLT_MAX", "CUDART_INF_F", "HUGE_VALF"} <= set(macros)
    assert prelude.NAME.startswith("kforge_prelude_") and prelude.OPTION == f"--pre-include={prelude.NAME}"
    import hashlib
    stand_ins = "".join(prelude.shims(())[n] for n in prelude.HOST_HEADERS)
    assert hashlib.sha256((prelude.PRELUDE + stand_ins).encode()).hexdigest()[:12] in prelude.NAME
    assert prelude.hint_for("no such error") is None


def test_a_kernel_that_includes_cooperative_groups_gets_the_same_integer_types_from_both():
    """CUDA's <cuda/std/cstdint> declares int64_t and the others under NVRTC; the prelude's must be
    the very same types, or every kernel including cooperative groups fails to compile."""
    src = """#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(long long* x, int n)
{
    cg::thread_block cta = cg::this_thread_block();
    int64_t v = (int64_t)n * INT32_MAX;
    uint64_t u = UINT64_MAX;
    cg::sync(cta);
    if (threadIdx.x == 0) x[0] = v + (long long)(u & 1);
}
"""
    res = compile_(src)
    assert "error" not in res.log.lower()


def test_a_kernel_that_includes_the_c_and_cpp_standard_headers_compiles_as_under_nvcc():
    """candle's and llm.c's files include <stdint.h>, <cmath>, <cassert> ...: NVRTC has none of them,
    and failed with "cannot open source file"; each now stands for what the prelude supplies."""
    includes = "".join(f"#include <{n}>\n" for n in prelude.HOST_HEADERS)
    src = includes + """extern "C" __global__ void k(std::uint32_t* u, float* x, const int64_t n)
{
    assert(n > 0);
    const size_t i = threadIdx.x;
    if ((int64_t)i < n) x[i] = std::sqrt(fabsf(x[i])) * (float)M_PI + (float)(u[i] % UINT32_MAX);
}
"""
    res = compile_(src)
    assert "error" not in res.log.lower() and res.cubin


def test_a_standard_header_an_include_folder_holds_is_not_stood_in_for(tmp_path):
    (tmp_path / "stdint.h").write_text("// a folder's own\n")
    assert "stdint.h" in prelude.shims(()) and "stdint.h" not in prelude.shims((str(tmp_path),))
    assert "#define assert(e) ((void)0)" in prelude.shims(())["cassert"]


def test_the_whole_of_cub_gets_a_hint_naming_the_headers_to_include_instead():
    src = '#include <cub/cub.cuh>\nextern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'
    with pytest.raises(CompileError) as info:
        compile_(src)
    assert "<cub/block/block_reduce.cuh>" in (info.value.hint or ""), str(info.value)


LLMC_STYLE = """// C++ linkage, as llm.c and most projects write kernels (no extern "C")
__device__ float twice(float v) { return 2.0f * v; }
__global__ void scale2(float* out, const float* inp, int N);
/* __global__ void not_a_kernel(int x) */
__global__ void __launch_bounds__(256) scale2(float* out, const float* inp, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = twice(inp[i]);
}
namespace helpers { __global__ void fill(float* p, float v) { p[threadIdx.x] = v; } }
template <int B> __global__ void tiled(float* p) { p[threadIdx.x] = B; }
template __global__ void tiled<4>(float*);
"""


def test_a_kernel_of_cpp_linkage_compiles_to_an_entry_the_driver_finds_by_its_name():
    """Every kernel head that lacks extern "C" gets it on its own line (the declaration and the
    definition alike, one in a namespace too), so the PTX's entries carry the kernels' own names; a
    template is left alone (mangled: it is no task's entry)."""
    res = compile_(LLMC_STYLE)
    entries = re.findall(r"^\.(?:visible|weak) \.entry (\w+)\(", res.ptx, re.M)
    assert "scale2" in entries and "fill" in entries
    assert [e for e in entries if "tiled" in e] == ["_Z5tiledILi4EEvPf"]
    bad = LLMC_STYLE.replace("out[i] = twice(inp[i]);", "out[i] = twice(inp[i]) + undefined_name;")
    with pytest.raises(CompileError) as info:
        compile_(bad)
    assert "wild.cu(8)" in str(info.value) or "line 8" in str(info.value)     # the kernel's own line numbers
