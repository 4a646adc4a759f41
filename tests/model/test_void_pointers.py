"""kernel_forge.model.void_pointers: the type a ``void*`` parameter holds, read from the casts the kernel
body makes of it; and how an untyped pointer meets a task's typed signature (check_matches)."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import SignatureError
from kernel_forge.model.signature import check_matches, find_entry, parse_signature
from kernel_forge.model.void_pointers import read_types, typed


def _read(src: str, name: str = "k"):
    sig, line = find_entry(src, name)
    return sig, read_types(src, line, sig)


@pytest.mark.parametrize("cast, want", [
    ("((const half*) x)[i]", "__half"),
    ("((half*)x)[i]", "__half"),
    ("reinterpret_cast<const float4*>(x)[i].x", "float"),          # a vector type: its lane
    ("static_cast<const __nv_bfloat16 *>(x)[i]", "__nv_bfloat16"),
    ("((const half2*)(x))[i].x", "__half"),
    ("((const int64_t*) x)[i]", "long long"),
    ("((const unsigned char*) x)[i] + ((const double*) x)[i]", "double"),   # bytes are address arithmetic
])
def test_the_first_cast_of_a_void_pointer_names_its_type(cast, want):
    src = f"__global__ void k(const void* x, float* y, int n)\n{{\n    int i = threadIdx.x;\n    y[i] = (float)({cast});\n}}\n"
    sig, types = _read(src)
    assert [(t.param, t.ctype, t.line) for t in types] == [("x", want, 4)]
    assert typed(sig, types).params[0].dtype.name == {"__half": "float16", "float": "float32", "__nv_bfloat16": "bfloat16",
                                                      "long long": "int64", "double": "float64"}[want]


def test_a_cast_of_another_kernel_or_of_a_name_that_merely_starts_alike_is_not_read():
    src = ("__global__ void other(const void* x, float* y) { y[0] = ((const double*)x)[0]; }\n"
           "__global__ void k(const void* x, const __half* w, float* y, int n)\n{\n"
           "    const float* xs = (const float*) xs_base; y[0] = __half2float(w[0]) + (float)(int)(x2);\n}\n")
    sig, types = _read(src)
    assert [(t.ctype, t.line) for t in types] == [("__half", 0)]      # the first typed pointer's type, a guess
    assert "typed pointer" in types[0].cast


def test_with_no_cast_and_no_typed_pointer_the_guess_is_float_and_says_so():
    sig, types = _read("__global__ void k(void* y, int n) { memset(y, 0, n); }\n")
    assert types[0].ctype == "float" and types[0].line == 0 and "no typed pointer" in types[0].cast


def test_both_types_a_flag_chooses_between_are_named():
    src = ("__global__ void k(const void* x, float* y, bool f32)\n{\n"
           "    y[0] = f32 ? ((const float*)x)[0] : __half2float(((const half*)x)[0]);\n}\n")
    _sig, types = _read(src)
    assert (types[0].ctype, types[0].others) == ("float", ("__half",))


def test_typed_writes_each_void_as_its_type_and_keeps_the_rest_of_the_text():
    sig = parse_signature("__global__ void k(const void* __restrict__ x, void *y, const void* z, int n)")
    from kernel_forge.model.void_pointers import ReadType
    out = typed(sig, [ReadType("x", "__half", 3, ""), ReadType("y", "float", 4, ""), ReadType("z", "unsigned char", 0, "")])
    assert out.text == "__global__ void k(const __half* __restrict__ x, float *y, const unsigned char* z, int n)"
    assert [p.untyped for p in out.params] == [False] * 4 and out.params[0].const and not out.params[1].const


def test_a_void_pointer_matches_any_pointer_the_task_declares_but_keeps_const():
    task = parse_signature("__global__ void k(const __half* x, float* y, int n)")
    check_matches(task, parse_signature("__global__ void k(const void* x, void* y, int n)"))
    with pytest.raises(SignatureError, match="drops `const`"):
        check_matches(task, parse_signature("__global__ void k(void* x, void* y, int n)"))
    with pytest.raises(SignatureError, match=r"parameter 3 \(n\)"):
        check_matches(task, parse_signature("__global__ void k(const void* x, void* y, void* n)"))
    with pytest.raises(SignatureError, match="names the type its buffer holds"):
        check_matches(parse_signature("__global__ void k(const void* x, float* y, int n)"), task)
    assert parse_signature("__global__ void k(const void* x)").params[0].describe() == "const void* x"


def test_void_by_value_is_still_refused():
    with pytest.raises(SignatureError, match="unsupported type 'void'"):
        parse_signature("__global__ void k(void x, float* y)")


def test_a_void_pointer_beside_a_bool_pointer_and_no_cast_takes_bool():
    sig, types = _read("__global__ void k(const bool* mask, void* y, int n) { y = 0; }\n")
    assert (types[0].param, types[0].ctype) == ("y", "bool")
