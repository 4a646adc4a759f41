"""kernel_forge.model.signature: parsing kernel declarations, finding the entry point, matching the task."""
from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from kernel_forge.common import dtypes
from kernel_forge.common.errors import SignatureError
from kernel_forge.model.signature import Signature, check_matches, find_entry, parse_signature, with_c_linkage

HEAD = 'extern "C" __global__ void k('
MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def sig(params: str) -> Signature:
    return parse_signature(HEAD + params + ")")


def refuse(text: str) -> SignatureError:
    with pytest.raises(SignatureError) as ei:
        parse_signature(text)
    return ei.value


def caret_target(exc: SignatureError) -> str:
    """The text from the caret to the end of the echoed signature."""
    lines = str(exc).splitlines()
    i = next(j for j, l in enumerate(lines) if l.strip() == "^")
    shown, caret = lines[i - 1], lines[i]
    assert shown == "    " + exc.signature
    return shown[caret.index("^"):]


# -- pointers ------------------------------------------------------------------------------

def test_pointer_constness_and_restrict():
    s = sig("const float* a, float const* b, float* __restrict__ c, "
            "const float* __restrict__ d, float * const e, const float* const __restrict__ f")
    got = [(p.name, p.dtype.name, p.pointer, p.const) for p in s.params]
    assert got == [
        ("a", "float32", True, True),
        ("b", "float32", True, True),
        ("c", "float32", True, False),
        ("d", "float32", True, True),
        ("e", "float32", True, False),   # const pointer, mutable pointee
        ("f", "float32", True, True),
    ]
    assert s.name == "k"
    assert s.names == ("a", "b", "c", "d", "e", "f")


def test_pointer_spacing_variants():
    s = sig("float *a, float*b, float * c, float*__restrict__ d")
    assert s.names == ("a", "b", "c", "d")
    assert all(p.pointer and not p.const for p in s.params)


def test_param_text_and_describe():
    s = sig("const __nv_bfloat16* __restrict__ x, int n")
    x, n = s.params
    assert x.text == "const __nv_bfloat16* __restrict__ x"
    assert x.describe() == "const bfloat16* x"
    assert n.describe() == "int32 n"
    assert s.param("n") is n
    with pytest.raises(KeyError):
        s.param("missing")


# -- scalars ---------------------------------------------------------------------------------

@pytest.mark.parametrize("ctype, dtype", [
    ("float", "float32"), ("double", "float64"),
    ("half", "float16"), ("__half", "float16"),
    ("__nv_bfloat16", "bfloat16"), ("nv_bfloat16", "bfloat16"),
    ("char", "int8"), ("signed char", "int8"), ("int8_t", "int8"),
    ("short", "int16"), ("int16_t", "int16"),
    ("int", "int32"), ("signed int", "int32"), ("int32_t", "int32"),
    ("long long", "int64"), ("long long int", "int64"), ("int64_t", "int64"),
    ("unsigned char", "uint8"), ("uint8_t", "uint8"),
    ("unsigned short", "uint16"), ("uint16_t", "uint16"),
    ("unsigned int", "uint32"), ("unsigned", "uint32"), ("uint32_t", "uint32"),
    ("unsigned long long", "uint64"), ("uint64_t", "uint64"), ("size_t", "uint64"), ("bool", "bool"),
])
def test_every_supported_scalar_and_pointer_type(ctype, dtype):
    s = sig(f"{ctype} v, const {ctype}* p, {ctype}* q")
    v, p, q = s.params
    assert (v.name, v.dtype.name, v.pointer, v.const) == ("v", dtype, False, False)
    assert (p.dtype.name, p.pointer, p.const) == (dtype, True, True)
    assert (q.dtype.name, q.pointer, q.const) == (dtype, True, False)
    assert v.dtype is dtypes.BY_NAME[dtype]


def test_const_scalar_is_not_marked_const():
    (n,) = sig("const int n").params
    assert (n.name, n.dtype.name, n.pointer, n.const) == ("n", "int32", False, False)


def test_whitespace_is_normalised():
    s = parse_signature('extern  "C"\n__global__\tvoid\n  k (\n  const float*  a,\n  unsigned   int n\n)')
    assert s.name == "k"
    assert [(p.name, p.dtype.name) for p in s.params] == [("a", "float32"), ("n", "uint32")]
    assert s.text == 'extern "C" __global__ void k ( const float* a, unsigned int n )'


@pytest.mark.parametrize("tail", ["", " {", " { return; }", ";"])
def test_trailing_brace_or_semicolon(tail):
    assert parse_signature(HEAD + "int n)" + tail).names == ("n",)


@pytest.mark.parametrize("params", ["", "void", " "])
def test_no_parameters(params):
    assert parse_signature(HEAD + params + ")").params == ()


@pytest.mark.parametrize("text", [
    'extern "C" __global__ void __launch_bounds__(256) k(float* a)',
    'extern "C" __global__ void __launch_bounds__(256, 2) k(float* a)',
    'extern "C" __global__ __launch_bounds__(1024, 1) void k(float* a)',
    # nested parentheses: what kforge's own-space search writes, and a user's macro arithmetic
    'extern "C" __global__ void __launch_bounds__((KF_BX * KF_BY), KF_MINB) k(float* a)',
    'extern "C" __global__ void __launch_bounds__(MAX((BX) * (BY), 32), 2) k(float* a)',
    'extern "C" __global__ void __maxnreg__((64)) __launch_bounds__((256)) k(float* a)',
])
def test_launch_bounds(text):
    s = parse_signature(text)
    assert s.name == "k"
    assert s.names == ("a",)


# -- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("params, message, at", [
    ("float& a", "references are not supported; pass a pointer", "& a)"),
    ("const float &a", "references are not supported", "&a)"),
    ("float a[4]", "array parameters are not supported; pass a pointer", "[4])"),
    ("vec<float> a", "templates are not supported", "<float> a)"),
    ("float** a", "pointers to pointers are not supported", "** a)"),
    ("float (*f)(int)", "function pointers are not supported", "(*f)(int))"),
    ("foo_t a", "unsupported type 'foo_t'", "foo_t a)"),
    ("struct S a", "unsupported type 'struct S'", "struct S a)"),
    ("float* int a", "unexpected 'int' after '*'", "int a)"),
    ("float*", "parameter has no name", ")"),
    ("int", "parameter needs a type and a name", "int)"),
])
def test_unsupported_parameters_are_refused_with_caret(params, message, at):
    exc = refuse(HEAD + "float* ok, " + params + ")")
    assert str(exc).startswith(message)
    assert caret_target(exc) == at


def test_a_default_value_is_read_past_a_launch_passes_every_argument():
    """cuda-samples' shfl_scan: ``int *partial_sums = NULL``; the parameter is the pointer, its text
    (what a bound pattern's entry writes) without the default."""
    s = sig("int* data, int width, int* partial_sums = NULL, float scale=1.0f")
    assert s.names == ("data", "width", "partial_sums", "scale")
    assert [p.text for p in s.params[2:]] == ["int* partial_sums", "float scale"]
    assert s.params[2].pointer and s.params[3].dtype.name == "float32"


def test_long_is_the_platform_s_long_as_nvrtc_compiles_it_here():
    """CUDA by Example's histogram takes ``long size``: on Linux a 64-bit integer, on Windows 32-bit."""
    s = sig("unsigned char* buffer, long size, unsigned long* histo, const long int* offsets")
    width = ctypes.sizeof(ctypes.c_long)
    assert [(p.dtype.kind, p.dtype.itemsize) for p in s.params[1:]] == [("int", width), ("uint", width), ("int", width)]
    assert s.params[1].dtype.ctype is (ctypes.c_int64 if width == 8 else ctypes.c_int32)


def test_unknown_type_lists_supported():
    exc = refuse(HEAD + "Matrix m)")
    assert "supported: bfloat16, bool, float16, float32, float64, int16, int32" in exc.hint


def test_empty_parameter_is_refused():
    exc = refuse(HEAD + "float* a,)")
    assert str(exc).startswith("empty parameter")
    assert caret_target(exc) == ")"


def test_a_kernel_of_cpp_linkage_is_taken_as_written():
    s = parse_signature("__global__ void __launch_bounds__(256) k(float* a, int n)")
    assert s.name == "k" and [p.name for p in s.params] == ["a", "n"]
    check_matches(s, parse_signature('extern "C" __global__ void k(float* x, int m)'))     # linkage is the compile's


@pytest.mark.parametrize("text", [
    'extern "C" void k(float* a)',                 # not __global__
    'extern "C" __global__ int k(float* a)',       # not void
    'extern "C++" __global__ void k(float* a)',
    'template <typename T> __global__ void k(T* a)',
])
def test_other_heads_are_refused(text):
    exc = refuse(text)
    assert str(exc).startswith('expected `__global__ void NAME(PARAMS)` (extern "C" or not)') and exc.column == 0
    assert (exc.hint is not None) == text.startswith("template")       # a template: declare its instance
    assert not text.startswith("template") or "// kforge: instance NAME<" in exc.hint


def test_c_linkage_is_written_before_each_kernel_head_that_lacks_it_on_its_own_line():
    src = ("#include <x.h>\n__global__ void k(float* a);\n// __global__ void gone(int)\n"
           "__global__ void __launch_bounds__(128) k(float* a) {}\nextern \"C\" __global__ void j(int n) {}\n"
           "template <int B>\n__global__ void t(float* p) {}\nstatic __global__ void s(int n) {}\n")
    out = with_c_linkage(src)
    assert out.splitlines() == ["#include <x.h>", 'extern "C" __global__ void k(float* a);', "// __global__ void gone(int)",
                                'extern "C" __global__ void __launch_bounds__(128) k(float* a) {}',
                                'extern "C" __global__ void j(int n) {}', "template <int B>",
                                "__global__ void t(float* p) {}", "static __global__ void s(int n) {}"]
    assert with_c_linkage(out) == out                                   # once only


def test_find_entry_names_the_definition_not_an_earlier_declaration_and_asks_a_template_for_its_instance():
    src = "__global__ void k(float* a, int n);\n\n__global__ void k(float* a, int n)\n{\n}\n"
    sig, line = find_entry(src, "k")
    assert line == 3 and sig.params[1].name == "n"
    assert find_entry("__global__ void k(float* a);\n", "k")[1] == 1       # only declared: still found
    with pytest.raises(SignatureError) as info:
        find_entry("template <int B>\n__global__ void t(float* p) {}\n", "t")
    assert "kernel t (line 2) is a template" in str(info.value)
    assert info.value.hint == "add a line `// kforge: instance t<...>` to the kernel file"
    sig, line = find_entry("template <int B = 4, class T = float>\n__global__ void t(T* p) {}\n// kforge: instance t<>\n", "t")
    assert line == 2 and sig.text == "__global__ void t(float* p)"      # the defaults


def test_unclosed_parameter_list():
    exc = refuse(HEAD + "float* a")
    assert str(exc).startswith("unclosed parameter list")
    assert exc.column == len(exc.signature)


def test_text_after_parameter_list():
    exc = refuse(HEAD + "float* a) const")
    assert str(exc).startswith("unexpected text after the parameter list")
    assert caret_target(exc) == " const"


def test_duplicate_names_are_refused():
    exc = refuse(HEAD + "float* a, int a)")
    assert str(exc).startswith("parameter name 'a' appears twice")


def test_duplicate_name_caret_points_at_second_parameter():
    exc = refuse(HEAD + "int n, float* a, float* n)")
    assert caret_target(exc) == "n)"


def test_signature_error_is_input_error():
    exc = refuse(HEAD + "float& a)")
    assert exc.exit_code == 2


# -- find_entry ------------------------------------------------------------------------------

SOURCE = '''// header comment
#include <cuda_fp16.h>

extern "C" __global__ void helper(float* x) {}

extern "C"
__global__ void __launch_bounds__(128)
k(const float* a,
  float* b, int n)
{
    b[0] = a[0] + n;
}
'''


def test_find_entry_sees_through_a_launch_bounds_with_nested_parentheses():
    # the own-space search's rewrite of a user's kernel: every setting was refused as
    # signature_mismatch ("no definition found") on the GPU, 0 of 1,800
    src = SOURCE.replace("__launch_bounds__(128)", "__launch_bounds__((KF_BX * KF_BY), KF_MINB)")
    s, line = find_entry(src, "k")
    assert (s.name, line, s.names) == ("k", 6, ("a", "b", "n"))


def test_find_entry_returns_signature_and_line():
    found = find_entry(SOURCE, "k")
    assert found is not None
    s, line = found
    assert line == 6
    assert s.name == "k"
    assert [(p.name, p.dtype.name, p.pointer, p.const) for p in s.params] == [
        ("a", "float32", True, True), ("b", "float32", True, False), ("n", "int32", False, False)]


def test_find_entry_other_kernels_and_missing():
    assert find_entry(SOURCE, "helper")[1] == 4
    assert find_entry(SOURCE, "helper")[0].names == ("x",)
    assert find_entry(SOURCE, "missing") is None
    assert find_entry(SOURCE, "kk") is None


def test_find_entry_refuses_unsupported_params_in_the_file():
    with pytest.raises(SignatureError, match="pointers to pointers"):
        find_entry('extern "C" __global__ void k(float** a) {}', "k")


@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.cu")), ids=lambda p: p.stem)
def test_find_entry_on_bundled_kernels(path):
    found = find_entry(path.read_text(), path.stem)
    assert found is not None
    s, line = found
    assert s.name == path.stem
    assert 'extern "C"' in path.read_text().splitlines()[line - 1]


def test_find_entry_ignores_comments():
    src = ('// old: extern "C" __global__ void k(float* a, int n)\n'
           '/* extern "C" __global__ void k(double* a) */\n'
           'extern "C" __global__ void k(const float* a, float* b, int n) {}\n')
    s, line = find_entry(src, "k")
    assert line == 3
    assert s.names == ("a", "b", "n")


# -- check_matches -----------------------------------------------------------------------------

EXPECTED = parse_signature(HEAD + "const float* a, float* b, int n)")


def mismatch(params: str, name: str = "k") -> str:
    actual = parse_signature(f'extern "C" __global__ void {name}({params})')
    with pytest.raises(SignatureError) as ei:
        check_matches(EXPECTED, actual)
    return str(ei.value)


def test_identical_and_renamed_parameters_match():
    check_matches(EXPECTED, sig("const float* a, float* b, int n"))
    check_matches(EXPECTED, sig("const float* __restrict__ x, float* __restrict__ y, int m"))
    check_matches(EXPECTED, sig("float const* a, float* b, int32_t n"))


def test_adding_const_to_an_output_is_accepted():
    check_matches(EXPECTED, sig("const float* a, const float* b, int n"))


def test_wrong_name():
    assert mismatch("const float* a, float* b, int n", name="j") == \
        "kernel is named 'j', the task expects 'k'"


def test_wrong_count():
    assert mismatch("const float* a, float* b") == (
        "kernel k takes 2 parameters, the task declares 3: (const float32* a, float32* b, int32 n)")


def test_wrong_type():
    assert mismatch("const float* a, double* b, int n") == \
        "parameter 2 (b) is `float64* b`, the task declares `float32* b`"
    assert mismatch("const float* a, float* b, unsigned n") == \
        "parameter 3 (n) is `uint32 n`, the task declares `int32 n`"


def test_pointer_versus_scalar():
    assert mismatch("const float* a, float b, int n") == \
        "parameter 2 (b) is `float32 b`, the task declares `float32* b`"


def test_dropped_const():
    assert mismatch("float* a, float* b, int n") == (
        "parameter 1 (a) drops `const`: the task declares it as an input (`const float32* a`)")


# -- CUDA vector types by pointer ------------------------------------------------------------------

@pytest.mark.parametrize("ctype, dtype, lanes", [
    ("float4", dtypes.FLOAT32, 4), ("float2", dtypes.FLOAT32, 2), ("float3", dtypes.FLOAT32, 3),
    ("uchar4", dtypes.UINT8, 4), ("char4", dtypes.INT8, 4), ("int2", dtypes.INT32, 2), ("uint4", dtypes.UINT32, 4),
    ("ushort2", dtypes.UINT16, 2), ("double2", dtypes.FLOAT64, 2), ("half2", dtypes.FLOAT16, 2),
    ("__half2", dtypes.FLOAT16, 2), ("__nv_bfloat162", dtypes.BFLOAT16, 2), ("longlong2", dtypes.INT64, 2),
])
def test_a_pointer_to_a_vector_type_is_a_buffer_of_its_lanes(ctype, dtype, lanes):
    s = sig(f"const {ctype}* __restrict__ src, {ctype} *dst, int n")
    src, dst = s.params[0], s.params[1]
    assert (src.dtype, src.lanes, src.vector, src.const, src.pointer) == (dtype, lanes, ctype, True, True)
    assert (dst.dtype, dst.lanes, dst.const) == (dtype, lanes, False)
    assert src.describe() == f"const {ctype}* src" and s.params[2].lanes == 1


def test_a_vector_type_by_value_is_refused_with_what_to_do():
    exc = refuse(HEAD + "float* ok, float4 v)")
    assert str(exc).startswith("a float4 by value is not supported; pass its lanes as scalars, or a pointer")
    assert caret_target(exc) == "float4 v)"
    assert "vector types" in refuse(HEAD + "float5* v)").hint


def test_a_vector_pointer_matches_only_the_same_lanes():
    expected = sig("const float4* a, float4* b, int n")
    check_matches(expected, sig("const float4* __restrict__ x, float4* y, int m"))
    for params, said in (("const float* a, float4* b, int n", "parameter 1 (a) is `const float32* a`, the task "
                                                                 "declares `const float4* a`"),
                         ("const float4* a, float2* b, int n", "parameter 2 (b) is `float2* b`, the task declares "
                                                                "`float4* b`"),
                         ("const int4* a, float4* b, int n", "parameter 1 (a) is `const int4* a`")):
        with pytest.raises(SignatureError) as ei:
            check_matches(expected, sig(params))
        assert str(ei.value).startswith(said)
