"""The scalar types a kernel parameter may have, and how each is stored on the host.

NumPy has no bfloat16, so bf16 buffers are stored as their 16-bit patterns (``uint16``) and
converted to float32 with :func:`to_float` / :func:`from_float` when a reference or a
comparison needs values.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str              # canonical name used in messages and evidence
    storage: str           # numpy dtype of the buffer's bytes
    ctype: type            # ctypes type used to pass a scalar of this type by value
    kind: str              # 'float', 'int' or 'uint'
    bits: int

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.storage)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def host_compute(self) -> np.dtype:
        """The NumPy dtype a reference sees for this type (bf16 is widened to float32; bool bytes are
        NumPy bools)."""
        if self.name == "bool":
            return np.dtype(np.bool_)
        return np.dtype(np.float32) if self.name == "bfloat16" else self.numpy


def _d(name, storage, ctype, kind, bits):
    return DType(name, storage, ctype, kind, bits)


FLOAT32 = _d("float32", "float32", ctypes.c_float, "float", 32)
FLOAT64 = _d("float64", "float64", ctypes.c_double, "float", 64)
FLOAT16 = _d("float16", "float16", ctypes.c_uint16, "float", 16)
BFLOAT16 = _d("bfloat16", "uint16", ctypes.c_uint16, "float", 16)
INT8 = _d("int8", "int8", ctypes.c_int8, "int", 8)
INT16 = _d("int16", "int16", ctypes.c_int16, "int", 16)
INT32 = _d("int32", "int32", ctypes.c_int32, "int", 32)
INT64 = _d("int64", "int64", ctypes.c_int64, "int", 64)
UINT8 = _d("uint8", "uint8", ctypes.c_uint8, "uint", 8)
UINT16 = _d("uint16", "uint16", ctypes.c_uint16, "uint", 16)
UINT32 = _d("uint32", "uint32", ctypes.c_uint32, "uint", 32)
UINT64 = _d("uint64", "uint64", ctypes.c_uint64, "uint", 64)
#: C++'s bool: one byte, 0 or 1, stored as uint8 (a reference sees NumPy bools: ``host_compute``)
BOOL = _d("bool", "uint8", ctypes.c_bool, "uint", 8)

#: C/CUDA spellings (after whitespace normalisation) → DType.
C_TYPES: dict[str, DType] = {
    "float": FLOAT32, "double": FLOAT64,
    "half": FLOAT16, "__half": FLOAT16,
    "__nv_bfloat16": BFLOAT16, "nv_bfloat16": BFLOAT16,
    "char": INT8, "signed char": INT8, "int8_t": INT8,
    "short": INT16, "short int": INT16, "signed short": INT16, "int16_t": INT16,
    "int": INT32, "signed int": INT32, "signed": INT32, "int32_t": INT32,
    "long long": INT64, "long long int": INT64, "signed long long": INT64, "int64_t": INT64,
    "unsigned char": UINT8, "uint8_t": UINT8,
    "unsigned short": UINT16, "unsigned short int": UINT16, "uint16_t": UINT16,
    "unsigned int": UINT32, "unsigned": UINT32, "uint32_t": UINT32,
    "unsigned long long": UINT64, "unsigned long long int": UINT64, "uint64_t": UINT64,
    "size_t": UINT64, "ptrdiff_t": INT64, "ssize_t": INT64, "intptr_t": INT64, "uintptr_t": UINT64,
    "std size_t": UINT64, "std ptrdiff_t": INT64, "ushort": UINT16, "uint": UINT32,
    "bool": BOOL,
}

#: CUDA's vector types, which a kernel may take by pointer: (the lane's type, the lanes).  A buffer of
#: ``float4`` is stored as float32 values with a trailing axis of 4 (the manifest's shape counts
#: vectors; the reference sees the lanes as the array's last axis).
VECTOR_TYPES: dict[str, tuple[DType, int]] = {
    **{f"float{n}": (FLOAT32, n) for n in (2, 3, 4)},
    **{f"int{n}": (INT32, n) for n in (2, 3, 4)},
    **{f"uint{n}": (UINT32, n) for n in (2, 3, 4)},
    **{f"char{n}": (INT8, n) for n in (2, 3, 4)},
    **{f"uchar{n}": (UINT8, n) for n in (2, 3, 4)},
    **{f"short{n}": (INT16, n) for n in (2, 3, 4)},
    **{f"ushort{n}": (UINT16, n) for n in (2, 3, 4)},
    "double2": (FLOAT64, 2), "longlong2": (INT64, 2), "ulonglong2": (UINT64, 2),
    "half2": (FLOAT16, 2), "__half2": (FLOAT16, 2),
    "__nv_bfloat162": (BFLOAT16, 2), "nv_bfloat162": (BFLOAT16, 2),
}

#: each storage type's C spelling (a vector buffer's lanes, as a bound pattern reads them)
LANE_CTYPES: dict[str, str] = {
    "float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long",
}

#: C's ``long``: its width is the platform's (64-bit on Linux and macOS, 32-bit on Windows), and NVRTC,
#: compiling on the machine that runs the kernel, gives it that width; a buffer of ``long`` is stored so.
_LONG64 = ctypes.sizeof(ctypes.c_long) == 8
PLATFORM_LONG: dict[str, DType] = {
    **dict.fromkeys(("long", "long int", "signed long", "signed long int"), INT64 if _LONG64 else INT32),
    **dict.fromkeys(("unsigned long", "unsigned long int"), UINT64 if _LONG64 else UINT32),
}
C_TYPES.update(PLATFORM_LONG)

BY_NAME: dict[str, DType] = {d.name: d for d in C_TYPES.values()}


def to_float(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """Values of a stored buffer as a float array (bf16 bit patterns widened to float32)."""
    if dtype.name == "bfloat16":
        return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(bits)


def from_float(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Store float values as ``dtype`` (round-to-nearest-even for bf16; a bool is whether the value
    is nonzero, as C++ converts it)."""
    if dtype.name == "bool":
        return (np.asarray(values) != 0).astype(np.uint8)
    if dtype.name == "bfloat16":
        f = np.ascontiguousarray(values, dtype=np.float32)
        u = f.view(np.uint32)
        # round to nearest even; wraps only for NaN patterns, which are overwritten below
        rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        out = rounded.astype(np.uint16)
        nan = np.isnan(f)
        if nan.any():
            out[nan] = 0x7FC0
        return out
    return np.asarray(values).astype(dtype.numpy)


def poison_value(dtype: DType) -> int | float:
    """A finite sentinel no sane output holds: unwritten elements are caught by comparison.

    The 64-bit values have two equal 32-bit halves, so a 32-bit memset writes them."""
    return {
        "float32": -3.0e38, "float16": -65504.0,
        "float64": -1.7976931346530367e+308,   # bits 0xFFEFFFFF_FFEFFFFF
        "bfloat16": 0xFF7F,  # bf16 bit pattern of about -3.39e38 (finite)
        "int8": -128 + 1, "int16": -32768 + 1, "int32": -2147483647 + 17,
        "int64": -9223371961692848111,          # bits 0x80000011_80000011
        "uint8": 0xEE, "uint16": 0xEEEE, "bool": 0xEE,
        "uint32": 0xDEADBEEF, "uint64": 0xDEADBEEFDEADBEEF,
    }[dtype.name]


def poison_bits(dtype: DType) -> int:
    """The poison value's storage bit pattern, as an unsigned integer of the type's width."""
    value = np.asarray(poison_value(dtype)).astype(dtype.numpy)
    return int(value.view(f"<u{dtype.itemsize}"))


def poison_memset(dtype: DType) -> tuple[int, int]:
    """``(width, pattern)``: a driver memset of ``width`` bytes (1, 2 or 4) per element with
    ``pattern`` fills a buffer of ``dtype`` with the poison value."""
    bits = poison_bits(dtype)
    if dtype.itemsize <= 4:
        return dtype.itemsize, bits
    lo, hi = bits & 0xFFFFFFFF, bits >> 32
    if lo != hi:  # pragma: no cover - poison_value keeps the halves equal
        raise ValueError(f"the {dtype.name} poison has unequal 32-bit halves")
    return 4, lo
