"""``kforge init NAME --from FILE`` on kernels written the way public projects ship them (each case a
pattern a probe of ten template kernels from vLLM, apex, bitsandbytes, FasterTransformer, DeepSpeed
and flashinfer ran into; the snippets are written here, no project code is copied): the task is
written, NVRTC compiles the kernel file, and the manifest's signature reads as the instance."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli

LOOP = "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"

CASES = {
    # a namespace alias (DeepSpeed's `namespace cg = cooperative_groups;`)
    "alias": ("block_sum", {"k.cu": "#include <cub/block/block_reduce.cuh>\nnamespace mycub = cub;\n"
                            "__global__ void block_sum(const float* x, float* out, int n)\n{\n"
                            "    typedef mycub::BlockReduce<float, 128> BR;\n    __shared__ typename BR::TempStorage t;\n"
                            "    const float s = BR(t).Sum(threadIdx.x < n ? x[threadIdx.x] : 0.0f);\n"
                            "    if (threadIdx.x == 0) out[0] = s;\n}\n"}),
    # __device__ behind a macro (DeepSpeed's DS_D_INLINE)
    "device_macro": ("sq", {"k.cu": "#define MY_INLINE __device__ __forceinline__\nMY_INLINE float sqr(float v) { return v * v; }\n"
                            "__global__ void sq(const float* x, float* y, int n)\n{\n" + LOOP + "    if (i < n) y[i] = sqr(x[i]);\n}\n"}),
    # a typedef'd enum with its declarator, and a struct with its alignment first
    # (and a class device code uses, with a defaulted constructor and member bodies that call functions:
    # llm.c's Packed128)
    "types": ("pick", {"k.cu": "typedef enum Kind_t { KA = 0, KB = 1 } Kind_t;\n__align__(8) struct Duo { int a; float b; };\n"
                       "template <class E>\nstruct alignas(16) Pack {\n    Pack() = default;\n"
                       "    __device__ explicit Pack(int4 b) { memcpy(&p, &b, sizeof(b)); }\n"
                       "    __device__ E& operator[](int k) { return p[k]; }\n    E p[16 / sizeof(E)];\n};\n"
                       "__global__ void pick(const float* x, float* y, int n)\n{\n" + LOOP
                       + "    Duo d = {KB, 0.0f};\n    Pack<float> q(make_int4(0, 0, 0, 0));\n"
                       "    if (i < n) y[i] = d.a * x[i] + q[0];\n}\n"}),
    # #if branches that each open a parenthesis, in a launcher inside the kernel's namespace
    "pp_parens": ("scale2", {"k.cu": "namespace ops {\n__global__ void scale2(const float* x, float* y, int n)\n{\n" + LOOP
                             + "    if (i < n) y[i] = 2.0f * x[i];\n}\nvoid launch(const float* x, float* y, int n, bool w)\n{\n"
                             "#ifdef WIDE\n    if (n > 0 && (w || n > 1024)\n#else\n    if (n > 0 && (w)\n#endif\n"
                             "        && n < 100) { scale2<<<1, 256>>>(x, y, n); }\n}\n}  // namespace ops\n"}),
    # the file's own explicit instantiations: the first is the instance, the lines compile
    "explicit": ("times_n", {"k.cu": "template <typename T, int N>\n__global__ void times_n(T* y, int n)\n{\n" + LOOP
                             + "    if (i < n) y[i] = y[i] * T(N);\n}\ntemplate __global__ void times_n<float, 3>(float* y, int n);\n"
                             "template __global__ void times_n<double, 4>(double* y, int n);\n"}),
    # an explicit specialization beside the primary template
    "specialized": ("inc", {"k.cu": "#include <cuda_fp16.h>\ntemplate <typename T>\n__global__ void inc(T* y, int n)\n{\n" + LOOP
                            + "    if (i < n) y[i] = y[i] + T(1);\n}\ntemplate <>\n__global__ void inc(__half* y, int n)\n{\n" + LOOP
                            + "    if (i < n) y[i] = __hadd(y[i], __float2half(1.0f));\n}\n"}),
    # a default naming an earlier parameter
    "default_of_default": ("cast", {"k.cu": "template <typename T, typename U, typename V = T>\n"
                                    "__global__ void cast(V* y, const T* x, U s, int n)\n{\n" + LOOP
                                    + "    if (i < n) y[i] = (V)((U)x[i] * s);\n}\n"}),
    # an instance line after macro calls with no semicolon, at the end of the file
    "tail_macro": ("times_k", {"k.cu": "template <typename T, int K>\n__global__ void times_k(T* y, int n)\n{\n" + LOOP
                               + "    if (i < n) y[i] = y[i] * T(K);\n}\ntemplate <typename T>\n__global__ void zero(T* y) { y[0] = T(0); }\n"
                               "#define MAKE_ZERO(T) template __global__ void zero<T>(T * y);\nMAKE_ZERO(float)\nMAKE_ZERO(double)\n"
                               "// kforge: instance times_k<float, 5>\n"}),
    # what nvcc's host headers bring in: CUDA_VERSION, <cmath>'s std::exp, ushort
    "nvcc_names": ("expo", {"k.cu": "#include <cuda.h>\n#include <cmath>\n#include <cuda_fp16.h>\n"
                            "__global__ void expo(const float* x, float* y, unsigned short* b, int n)\n{\n" + LOOP
                            + "#if CUDA_VERSION >= 9000\n    const float v = i < n ? std::exp(x[i]) : 0.0f;\n#else\n"
                            "    const float v = undefined_before_9000;\n#endif\n"
                            "    ushort h = __half_as_ushort(__float2half(v));\n    if (i < n) { y[i] = v; b[i] = h; }\n}\n"}),
    # PyTorch's 16-bit type in the signature and its macros in the body (ATen headers left out)
    "aten": ("to_float", {"k.cu": "#include <ATen/ATen.h>\n#include <c10/macros/Macros.h>\n"
                          "__global__ void C10_LAUNCH_BOUNDS_1(256) to_float(const at::Half* x, float* y, int n)\n{\n"
                          "    int i = blockIdx.x * C10_WARP_SIZE * 8 + threadIdx.x;\n"
                          "    float v = i < n ? static_cast<float>(x[i]) : 0.0f;\n    v += WARP_SHFL_XOR(v, 1) * 0.0f;\n"
                          "    if (i < n) y[i] = v;\n}\n"}),
    # a project header that includes another, and one included with angle brackets
    "nested_headers": ("twice", {"k.cu": '#include "outer.h"\n#include <mine.cuh>\n'
                                 "__global__ void twice(const float* x, float* y, int n)\n{\n" + LOOP
                                 + "    if (i < n) y[i] = dbl(x[i]) + OFFSET;\n}\n",
                                 "outer.h": '#pragma once\n#include "inner.h"\n__device__ inline float dbl(float v) { return SCALE * v; }\n',
                                 "inner.h": "#pragma once\n#define SCALE 2.0f\n", "mine.cuh": "#pragma once\n#define OFFSET 0.0f\n"}),
    # a header's functions marked by a macro another header defines (DeepSpeed's DS_D_INLINE)
    "macro_elsewhere": ("halve", {"k.cu": '#include "defs.h"\n#include "ops.h"\n'
                                  "__global__ void halve(const float* x, float* y, int n)\n{\n" + LOOP
                                  + "    if (i < n) y[i] = half_of(x[i]);\n}\n",
                                  "defs.h": "#pragma once\n#define D_INLINE __device__ __forceinline__\n",
                                  "ops.h": '#pragma once\n#include "defs.h"\nD_INLINE float half_of(float v) { return 0.5f * v; }\n'}),
    # kernels a macro writes, one per type (candle's UNARY_OP), a toolkit header a project header includes
    # with quotes, a host class and a sample's name string beside them
    "macro_written": ("twice_f32", {"k.cu": '#include "compat.cuh"\nconst char* sample_name = "twice";\n'
                                    "#define TWICE_OP(T, NAME) \\\n"
                                    'extern "C" __global__ void NAME(const T* in, T* out, int n) { \\\n'
                                    "    int i = blockIdx.x * blockDim.x + threadIdx.x; \\\n"
                                    "    if (i < n) out[i] = in[i] + in[i]; \\\n}\n"
                                    "TWICE_OP(float, twice_f32)\nTWICE_OP(double, twice_f64)\nTWICE_OP(__half, twice_f16)\n",
                                    "compat.cuh": '#pragma once\n#include "cuda_fp16.h"\n#include <string>\n'
                                                  "class Timer {\n public:\n  Timer();\n  const std::string& name() const;\n};\n"}),
    # untyped buffers cast inside, behind a flag (exllamav2's `const void* x`)
    "void_pointers": ("widen", {"k.cu": "#include <cuda_fp16.h>\n"
                                "__global__ void widen(void* __restrict__ out, const void* in, bool in_fp32, int n)\n{\n"
                                + LOOP + "    if (i >= n) return;\n"
                                "    const float v = in_fp32 ? ((const float*)in)[i] : __half2float(((const half*) in)[i]);\n"
                                "    reinterpret_cast<float*>(out)[i] = 2.0f * v;\n}\n"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_kernel_as_a_project_ships_it_is_set_up_and_compiles(case, tmp_path):
    kernel, files = CASES[case]
    src = tmp_path / "src"
    src.mkdir()
    for name, text in files.items():
        (src / name).write_text(text)
    r = CliRunner().invoke(cli, ["init", kernel, "--from", str(src / "k.cu"), "--dir", str(tmp_path / "task")])
    assert r.exit_code == 0 and "validated" in r.output, r.output
    manifest = json.loads((tmp_path / "task" / f"{kernel}.json").read_text())
    written = (tmp_path / "task" / f"{kernel}.cu").read_text()
    assert len(written.splitlines()) >= len(files["k.cu"].splitlines())        # line for line
    sig = manifest["signature"]
    if case == "explicit":
        assert "// kforge: instance times_n<float, 3>" in written and "times_n(float* y, int n)" in sig
    if case == "specialized":
        assert "// kforge: instance inc<float>" in written
    if case == "default_of_default":
        assert sig == "__global__ void cast(float* y, const float* x, float s, int n)"
    if case == "tail_macro":
        assert "// kforge: instance times_k<float, 5>" in written and "MAKE_ZERO(float)" not in written
    if case == "aten":
        assert sig == "__global__ void C10_LAUNCH_BOUNDS_1(256) to_float(const __half* x, float* y, int n)"
        assert '#include "kforge/torch_compat.cuh"' in written
    if case == "nested_headers":
        assert manifest["headers"] == ["twice.inner.h", "twice.mine.cuh", "twice.outer.h"]
        assert '#include "twice.inner.h"' in (tmp_path / "task" / "twice.outer.h").read_text()
    if case == "macro_written":
        assert sig == 'extern "C" __global__ void twice_f32(const float* in, float* out, int n)'
        assert "TWICE_OP(float, twice_f32)" in written and "sample_name" not in written
        assert "class Timer" not in (tmp_path / "task" / "twice_f32.compat.cuh").read_text()
    if case == "types":
        assert "struct alignas(16) Pack {" in written
    if case == "void_pointers":        # the first cast of each, in the task's signature; the kernel keeps void*
        assert sig == "__global__ void widen(float* __restrict__ out, const float* in, bool in_fp32, int n)"
        assert "void* __restrict__ out, const void* in" in written
    if case == "pp_parens":
        assert "scale2<<<" not in written and "void launch" not in written


def test_a_flag_parameter_is_a_constant_not_a_size(tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void maybe_neg(const float* x, float* y, int n, bool negate)\n{\n" + LOOP
                                   + "    if (i < n) y[i] = negate ? -x[i] : x[i];\n}\n")
    r = CliRunner().invoke(cli, ["init", "maybe_neg", "--from", str(tmp_path / "k.cu"), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 0 and "validated" in r.output, r.output
    manifest = json.loads((tmp_path / "t" / "maybe_neg.json").read_text())
    assert manifest["args"]["negate"] == 0 and all("negate" not in c["vars"] for c in manifest["cases"])
    assert "negate: bool negate -> a flag, 0 (false)" in r.output


def test_the_standard_librarys_own_types_get_a_hint_naming_cuda_std(tmp_path):
    (tmp_path / "k.cu").write_text("#include <limits>\n__global__ void lowest(float* y, int n)\n{\n" + LOOP
                                   + "    if (i < n) y[i] = std::numeric_limits<float>::lowest();\n}\n")
    r = CliRunner().invoke(cli, ["init", "lowest", "--from", str(tmp_path / "k.cu"), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 0 and "validation failed" in r.output
    r = CliRunner().invoke(cli, ["validate", str(tmp_path / "t" / "lowest.json")])
    assert r.exit_code != 0 and "cuda::std::numeric_limits" in r.output, r.output


def test_a_kernel_kept_in_an_included_header_is_named_with_the_header_to_start_from(tmp_path):
    """cuda-samples keep a sample's kernels in NAME_kernel.cuh, included by NAME.cu after the macros it
    needs; the kernels a macro writes are listed by name, not by the macro's parameter (FN_NAME)."""
    (tmp_path / "haar_kernel.cuh").write_text("__global__ void haar(const float* x, float* y, int n)\n{\n" + LOOP
                                              + "    if (i < n) y[i] = INV_SQRT_2 * x[i];\n}\n")
    (tmp_path / "haar.cu").write_text("#define INV_SQRT_2 0.70710678118654752440f\n#include \"haar_kernel.cuh\"\n"
                                      "#define MAKE(FN_NAME) __global__ void FN_NAME(float* y) { y[0] = 0.0f; }\n"
                                      "MAKE(zero_a)\nint main() { return 0; }\n")
    r = CliRunner().invoke(cli, ["init", "haar", "--from", str(tmp_path / "haar.cu"), "--dir", str(tmp_path / "t")])
    assert r.exit_code == 2, r.output
    assert "kernels found: zero_a; haar is defined in haar_kernel.cuh, which haar.cu includes" in r.output
    assert "kforge init haar --from haar_kernel.cuh" in r.output and "FN_NAME" not in r.output
