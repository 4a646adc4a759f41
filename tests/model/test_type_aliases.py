"""kernel_forge/model/type_aliases.py: the type names a kernel file gives its types, read as the
preprocessor sees the file with no -D (llm.c's floatX)."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import SignatureError
from kernel_forge.model.signature import find_entry, resolved_text
from kernel_forge.model.type_aliases import aliases

HEADER = """#pragma once
#include <cuda_runtime.h>
#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#elif defined(ENABLE_FP16)
typedef half floatX;
#else
typedef float floatX;
#endif
typedef floatX scalar_t;            // an alias of an alias
using index_t = long long;
#if PRECISION_LEVEL > 1             // an identifier no #define names counts as 0
typedef double acc_t;
#else
typedef float acc_t;
#endif
"""
KERNEL = """#include "common.h"
__global__ void k(scalar_t* out, const floatX* inp, const index_t* idx, acc_t s, int n) { }
"""


def test_the_active_typedefs_hold_and_an_alias_resolves_through_another():
    assert aliases(KERNEL, {"common.h": HEADER}) == {"floatX": "float", "scalar_t": "float", "index_t": "long long",
                                                     "acc_t": "float"}


@pytest.mark.parametrize("define, floatx", [("#define ENABLE_BF16", "__nv_bfloat16"), ("#define ENABLE_FP16 1", "half"),
                                            ("#define ENABLE_BF16\n#undef ENABLE_BF16", "float")])
def test_a_define_before_the_include_chooses_the_branch(define, floatx):
    got = aliases(define + "\n" + KERNEL, {"common.h": HEADER})
    assert got["floatX"] == got["scalar_t"] == floatx


def test_a_define_after_the_include_does_not():
    assert aliases(KERNEL + "#define ENABLE_BF16\n", {"common.h": HEADER})["floatX"] == "float"


def test_find_entry_reads_the_file_s_own_types_and_the_manifest_text_names_the_types():
    src = "#define ENABLE_BF16\n" + KERNEL
    sig, line = find_entry(src, "k", {"common.h": HEADER})
    assert line == 3 and [p.dtype.name for p in sig.params] == ["bfloat16", "bfloat16", "int64", "float32", "int32"]
    assert resolved_text(sig, src, {"common.h": HEADER}) == (
        "__global__ void k(__nv_bfloat16* out, const __nv_bfloat16* inp, const long long* idx, float s, int n)")
    with pytest.raises(SignatureError, match="unsupported type 'scalar_t'"):
        find_entry(src, "k")                                  # without the header there is no floatX


def test_a_type_named_by_a_define_is_read_as_the_type_it_stands_for_and_other_defines_are_not_types():
    src = ("#define DATA_TYPE float\n#define fp double\n#define N 4096\n#define SCALE (1.0f / 255)\n"
           "#ifdef USE_HALF\n#define real_t half\n#else\n#define real_t DATA_TYPE\n#endif\n"
           "__global__ void atax(DATA_TYPE* A, fp* x, real_t* y, int nx) { }\n")
    got = aliases(src)
    assert got == {"DATA_TYPE": "float", "fp": "double", "real_t": "float"}        # PolyBench's and Rodinia's
    sig, _ = find_entry(src, "atax")
    assert [p.dtype.name for p in sig.params] == ["float32", "float64", "float32", "int32"]
