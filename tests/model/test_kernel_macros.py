"""kernel_forge/model/kernel_macros.py: kernels a function-like macro writes, found by their names."""
from __future__ import annotations

from kernel_forge.model.kernel_macros import expanded, kernel_macros
from kernel_forge.model.signature import find_entry

SRC = ("#define OP(T, NAME, F) \\\n"
       'extern "C" __global__ void NAME(const T* x, T* y, int n) { \\\n'
       "  int i = threadIdx.x; if (i < n) { T v = x[i]; y[i] = F; } }\n"
       "#define GLUE(a, b) a ## b\n"
       "#define NAMED(T) extern \"C\" __global__ void GLUE(neg_, T)(const T* x, T* y) { y[0] = -x[0]; }\n"
       "#define KIND(T) extern \"C\" __global__ void kind_##T(const char* s) { }\n"
       "OP(float, twice_f32, 2.0f * v)\n\nOP(double,\n   twice_f64, 2.0 * v)\nKIND(int)\n")


def test_only_macros_that_write_kernels_are_read_and_their_invocations_written_out():
    assert sorted(kernel_macros(SRC)) == ["KIND", "NAMED", "OP"]
    text, spans = expanded(SRC)
    assert [s.line for s in spans] == [7, 9, 11]
    assert 'extern "C" __global__ void twice_f32(const float* x, float* y, int n)' in text
    assert 'extern "C" __global__ void kind_int(const char* s)' in text          # a ## pastes
    assert "#define OP(T, NAME, F)" in text                                      # the definitions stay


def test_a_kernel_a_macro_writes_is_found_at_its_invocation_and_one_it_does_not_is_not():
    sig, line = find_entry(SRC, "twice_f64")
    assert line == 9 and [(p.name, p.dtype.name) for p in sig.params] == [("x", "float64"), ("y", "float64"),
                                                                            ("n", "int32")]
    assert find_entry(SRC, "twice_f16") is None and find_entry(SRC, "NAME") is None
