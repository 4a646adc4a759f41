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


def test_a_macro_that_calls_a_kernel_writing_macro_from_a_header_writes_one_too():
    header = ("#define OP_OUT(T, TOUT, NAME, F) \\\n"
              'extern "C" __global__ void NAME(const T* a, const T* b, TOUT* out, int n) { \\\n'
              "  int i = threadIdx.x; if (i < n) { T x = a[i], y = b[i]; out[i] = F; } }\n"
              "#define OP(T, NAME, F) OP_OUT(T, T, NAME, F)\n")
    src = '#include "ops.cuh"\nOP(float, mul_f32, x * y)\nOP_OUT(float, unsigned char, eq_f32, x == y)\n'
    assert sorted(kernel_macros("", header)) == ["OP", "OP_OUT"]
    sig, line = find_entry(src, "mul_f32", {"ops.cuh": header})
    assert line == 2 and [p.dtype.name for p in sig.params] == ["float32", "float32", "float32", "int32"]
    sig, line = find_entry(src, "eq_f32", {"ops.cuh": header})
    assert line == 3 and sig.params[2].dtype.name == "uint8"
    assert find_entry(src, "mul_f32") is None                 # without the header, nothing writes it
