"""Tests of kernel_forge/common/dtypes.py: scalar types, bf16 bits and the poison values."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from kernel_forge.common import dtypes
from kernel_forge.common.dtypes import (PLATFORM_LONG, BFLOAT16, BY_NAME, C_TYPES, FLOAT16, FLOAT32, INT32, UINT64,
                                        from_float, poison_bits, poison_memset, poison_value, to_float)


def test_c_spellings_name_their_types_and_long_is_the_platform_s_long():
    assert C_TYPES["size_t"] is UINT64 and C_TYPES["unsigned"] is C_TYPES["uint32_t"]
    assert C_TYPES["__nv_bfloat16"] is BFLOAT16 and C_TYPES["half"] is FLOAT16 and C_TYPES["signed"] is INT32
    for spelling in ("long", "long int", "signed long", "unsigned long", "unsigned long int"):
        d = C_TYPES[spelling]
        assert d is PLATFORM_LONG[spelling] and d.itemsize == ctypes.sizeof(ctypes.c_long)       # NVRTC's width here
        assert d.kind == ("uint" if spelling.startswith("unsigned") else "int")
    assert set(BY_NAME) == {"float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
                            "uint8", "uint16", "uint32", "uint64", "bool"}
    assert C_TYPES["bool"].numpy == np.uint8 and C_TYPES["bool"].host_compute == np.bool_


def test_a_type_s_storage_its_width_and_what_a_reference_sees():
    assert (BFLOAT16.itemsize, BFLOAT16.numpy, BFLOAT16.host_compute) == (2, np.dtype(np.uint16), np.dtype(np.float32))
    assert (FLOAT16.numpy, FLOAT16.host_compute, FLOAT16.ctype) == (np.dtype(np.float16), np.dtype(np.float16),
                                                                   ctypes.c_uint16)
    assert (UINT64.itemsize, UINT64.is_float, FLOAT32.is_float) == (8, False, True)
    for d in BY_NAME.values():                     # the storage holds exactly the declared bits
        assert d.numpy.itemsize == d.itemsize, d.name


def test_poison_bits_are_the_poison_value_s_bytes():
    assert poison_bits(FLOAT32) == int(np.float32(-3.0e38).view(np.uint32))
    assert poison_bits(BFLOAT16) == 0xFF7F
    assert poison_bits(INT32) == (-2147483647 + 17) & 0xFFFFFFFF
    # 64-bit poison: two equal 32-bit halves, so a 4-byte memset writes it
    assert poison_bits(UINT64) == 0xDEADBEEFDEADBEEF and poison_memset(UINT64) == (4, 0xDEADBEEF)
    assert poison_memset(FLOAT16) == (2, int(np.float16(-65504.0).view(np.uint16)))


def test_poison_values_are_finite():
    for dt in {d.name: d for d in dtypes.C_TYPES.values()}.values():
        pv = np.asarray(poison_value(dt)).astype(dt.numpy)
        assert np.all(np.isfinite(to_float(pv, dt))), dt.name


@pytest.mark.parametrize("dtype", list(BY_NAME.values()), ids=lambda d: d.name)
def test_a_memset_of_the_poison_pattern_writes_the_poison_value(dtype):
    width, pattern = poison_memset(dtype)
    assert width in (1, 2, 4) and 0 <= pattern < 2 ** (8 * width)
    n = 6
    filled = np.frombuffer(np.full(n * dtype.itemsize // width, pattern, dtype=f"<u{width}").tobytes(),
                           dtype=dtype.numpy)
    want = np.full(n, poison_value(dtype), dtype=dtype.numpy)
    assert filled.tobytes() == want.tobytes()
    if dtype.kind == "float" and dtype.name != "bfloat16":
        assert np.isfinite(filled).all()


# -- bf16 ----------------------------------------------------------------------------------------

def bf16(*values) -> list[int]:
    return [int(v) for v in from_float(np.array(values, dtype=np.float32), BFLOAT16)]


def test_bf16_exact_values():
    assert bf16(1.0, -2.5, 0.0, -0.0, np.inf, -np.inf) == [0x3F80, 0xC020, 0x0000, 0x8000, 0x7F80, 0xFF80]


def test_bf16_round_to_nearest_even():
    # 1 + 2^-8 lies halfway between 0x3F80 (even) and 0x3F81: ties go to even
    assert bf16(1 + 2 ** -8) == [0x3F80]
    # 1 + 3 * 2^-8 lies halfway between 0x3F81 (odd) and 0x3F82 (even)
    assert bf16(1 + 3 * 2 ** -8) == [0x3F82]
    # just above the halfway point rounds up
    assert bf16(1 + 2 ** -8 + 2 ** -16) == [0x3F81]
    # the carry propagates into the exponent
    assert bf16(np.float32(np.frombuffer(np.uint32(0x3FFF8000).tobytes(), np.float32)[0])) == [0x4000]
    # the largest float32 rounds to infinity, as hardware does
    assert bf16(np.finfo(np.float32).max) == [0x7F80]


def test_bf16_nan():
    out = bf16(np.nan, -np.nan)
    assert out == [0x7FC0, 0x7FC0]
    assert np.isnan(to_float(np.array(out, np.uint16), BFLOAT16)).all()


def test_bf16_round_trip_of_representable_values():
    bits = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16)
    finite = bits[np.isfinite(to_float(bits, BFLOAT16))]
    assert np.array_equal(from_float(to_float(finite, BFLOAT16), BFLOAT16), finite)


def test_to_float_other_dtypes():
    a = np.array([1.5, 2.5], np.float32)
    assert to_float(a, FLOAT32) is not None and np.array_equal(to_float(a, FLOAT32), a)
    assert from_float(np.array([1.5, -2.0]), INT32).dtype == np.int32
    assert from_float(np.array([1.5]), FLOAT16).dtype == np.float16
