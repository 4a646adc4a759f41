"""What nvcc gives a kernel without an ``#include``, for NVRTC: a small prelude header.

nvcc includes ``cuda_runtime.h`` (and with it ``<math.h>``, ``<limits.h>``, ``<float.h>``,
``<stdint.h>`` of the host) in every ``.cu`` file, so kernels written for nvcc use ``INFINITY``,
``M_PI``, ``FLT_MAX`` or ``int64_t`` without saying where they come from; NVRTC has none of them.
:data:`PRELUDE` supplies them; :func:`compile_source <kernel_forge.gpu.nvrtc.compile_source>`
gives it to NVRTC as an in-memory header named :data:`NAME` and pre-includes it
(``--pre-include``), so the kernel's own line numbers are unchanged in every message.

* Every macro is guarded (``#ifndef``); a kernel that defines one itself after the prelude
  keeps its own definition: the prelude silences NVRTC's warning 47 ("incompatible redefinition
  of macro") for that, and only that.
* The fixed-width integer types are the very types CUDA's own ``<cuda/std/cstdint>`` declares
  under NVRTC (``int64_t`` is ``signed long long``), so a kernel that includes a CUDA header
  declaring them too (cooperative groups, CUB) compiles: C++ allows a typedef to be repeated
  with the same type.
* The ``CUDART_*`` constants of ``math_constants.h`` are there too (kernels written for nvcc
  often include it; with the prelude the include is not needed, and its absence no error).

:func:`hint_for` maps NVRTC's ``identifier "X" is undefined`` to what to add, for the names a
prelude cannot supply (a header's types, CUB, cooperative groups, the standard library).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re

_MACROS = (
    # <math.h>
    ("INFINITY", "__int_as_float(0x7f800000)"), ("NAN", "__int_as_float(0x7fffffff)"),
    ("HUGE_VALF", "__int_as_float(0x7f800000)"), ("HUGE_VAL", "__longlong_as_double(0x7ff0000000000000LL)"),
    ("M_E", "2.7182818284590452354"), ("M_LOG2E", "1.4426950408889634074"), ("M_LOG10E", "0.43429448190325182765"),
    ("M_LN2", "0.69314718055994530942"), ("M_LN10", "2.30258509299404568402"), ("M_PI", "3.14159265358979323846"),
    ("M_PI_2", "1.57079632679489661923"), ("M_PI_4", "0.78539816339744830962"), ("M_1_PI", "0.31830988618379067154"),
    ("M_2_PI", "0.63661977236758134308"), ("M_2_SQRTPI", "1.12837916709551257390"),
    ("M_SQRT2", "1.41421356237309504880"), ("M_SQRT1_2", "0.70710678118654752440"),
    # <float.h>
    ("FLT_MAX", "3.402823466e+38F"), ("FLT_MIN", "1.175494351e-38F"), ("FLT_EPSILON", "1.192092896e-07F"),
    ("DBL_MAX", "1.7976931348623158e+308"), ("DBL_MIN", "2.2250738585072014e-308"),
    ("DBL_EPSILON", "2.2204460492503131e-016"), ("FLT_MANT_DIG", "24"), ("DBL_MANT_DIG", "53"),
    # <limits.h>
    ("CHAR_BIT", "8"), ("SCHAR_MAX", "127"), ("SCHAR_MIN", "(-128)"), ("UCHAR_MAX", "255"),
    ("SHRT_MAX", "32767"), ("SHRT_MIN", "(-32768)"), ("USHRT_MAX", "65535"),
    ("INT_MAX", "2147483647"), ("INT_MIN", "(-2147483647 - 1)"), ("UINT_MAX", "4294967295U"),
    ("LLONG_MAX", "9223372036854775807LL"), ("LLONG_MIN", "(-9223372036854775807LL - 1)"),
    ("ULLONG_MAX", "18446744073709551615ULL"),
    # <stdint.h>
    ("INT8_MAX", "127"), ("INT16_MAX", "32767"), ("INT32_MAX", "2147483647"), ("INT64_MAX", "9223372036854775807LL"),
    ("INT32_MIN", "(-2147483647 - 1)"), ("INT64_MIN", "(-9223372036854775807LL - 1)"),
    ("UINT8_MAX", "255"), ("UINT16_MAX", "65535"), ("UINT32_MAX", "4294967295U"),
    ("UINT64_MAX", "18446744073709551615ULL"),
    # math_constants.h (CUDA)
    ("CUDART_INF_F", "__int_as_float(0x7f800000)"), ("CUDART_NAN_F", "__int_as_float(0x7fffffff)"),
    ("CUDART_MIN_DENORM_F", "__int_as_float(0x00000001)"), ("CUDART_MAX_NORMAL_F", "__int_as_float(0x7f7fffff)"),
    ("CUDART_NEG_ZERO_F", "__int_as_float(0x80000000)"), ("CUDART_ZERO_F", "0.0f"), ("CUDART_ONE_F", "1.0f"),
    ("CUDART_PI_F", "3.141592654f"), ("CUDART_PIO2_F", "1.570796327f"), ("CUDART_SQRT_HALF_F", "0.707106781f"),
    ("CUDART_SQRT_2_F", "1.414213562f"), ("CUDART_L2E_F", "1.442695041f"), ("CUDART_LN2_F", "0.693147181f"),
    ("CUDART_INF", "__longlong_as_double(0x7ff0000000000000LL)"),
    ("CUDART_NAN", "__longlong_as_double(0xfff8000000000000LL)"), ("CUDART_PI", "3.1415926535897931e+0"),
    ("CUDART_SQRT_2", "1.4142135623730951e+0"), ("CUDART_LN2", "6.9314718055994529e-1"),
    # <cuda.h>, which nvcc's host includes bring in: the toolkit's version (12080 for 12.8), as NVRTC's own is
    ("CUDA_VERSION", "(__CUDACC_VER_MAJOR__ * 1000 + __CUDACC_VER_MINOR__ * 10)"),
)

_TYPES = """typedef signed char int8_t; typedef signed short int16_t; typedef signed int int32_t;
typedef signed long long int64_t; typedef unsigned char uint8_t; typedef unsigned short uint16_t;
typedef unsigned int uint32_t; typedef unsigned long long uint64_t;
typedef int64_t intptr_t; typedef uint64_t uintptr_t; typedef int64_t intmax_t; typedef uint64_t uintmax_t;
typedef unsigned short ushort; typedef unsigned int uint; typedef unsigned long ulong;
namespace std { using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t; using ::uint16_t;
using ::uint32_t; using ::uint64_t; using ::intptr_t; using ::uintptr_t; using ::size_t; }
"""

#: <cmath>'s std:: names of the device math functions (nvcc's host headers declare them; NVRTC has none):
#: each the same function as the global one, so a call of either, or `using namespace std`, is unambiguous
_STD_MATH = ("exp expf log logf sqrt sqrtf tanh tanhf fabs fabsf abs pow powf floor floorf ceil ceilf fmax fmaxf fmin "
             "fminf max min erf erff sin sinf cos cosf exp2 exp2f log2 log2f round roundf fma fmaf isnan isinf "
             "isfinite rint rintf trunc truncf log1p expm1")


def _text() -> str:
    lines = ["// kernel_forge: what nvcc brings into every .cu file implicitly (see kernel_forge/gpu/prelude.py)",
             "#pragma once", "#pragma nv_diag_suppress 47"]
    for name, value in _MACROS:
        lines += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
    std = "namespace std { " + " ".join(f"using ::{f};" for f in _STD_MATH.split()) + " }\n"
    return "\n".join(lines) + "\n" + _TYPES + std


#: the C and C++ standard headers kernels written for nvcc include (nvcc finds the host's; NVRTC has
#: none, and fails with "cannot open source file"): what a kernel takes from them is in the prelude,
#: so each is handed to NVRTC as an in-memory header of nothing more (see :func:`shims`)
HOST_HEADERS = ("stdint.h", "cstdint", "inttypes.h", "cinttypes", "math.h", "cmath", "float.h", "cfloat", "limits.h",
                "climits", "stddef.h", "cstddef", "stdio.h", "cstdio", "stdlib.h", "cstdlib", "assert.h", "cassert",
                "string.h", "cstring")


def _shim(name: str) -> str:
    text = f"// {name}: under NVRTC, what a kernel takes from it comes with kforge's prelude (kernel_forge/gpu/prelude.py)\n"
    if name in ("assert.h", "cassert"):      # device asserts compiled out, as nvcc's -DNDEBUG builds do
        text += "#ifndef assert\n#define assert(e) ((void)0)\n#endif\n"
    return text


#: the header's text
PRELUDE = _text()
#: the in-memory header's name; a hash of its text (and of the host headers' stand-ins) is part of it,
#: so the compile cache's key (which holds the options, ``--pre-include=NAME`` among them) changes with them
NAME = f"kforge_prelude_{hashlib.sha256((PRELUDE + ''.join(map(_shim, HOST_HEADERS))).encode()).hexdigest()[:12]}.h"


@functools.lru_cache(maxsize=8)
def shims(include_dirs: tuple[str, ...]) -> dict[str, str]:
    """The stand-ins for :data:`HOST_HEADERS`, name -> text, for each name no include folder holds
    (a folder's own header of that name is NVRTC's to find)."""
    return {n: _shim(n) for n in HOST_HEADERS if not any(os.path.isfile(os.path.join(d, n)) for d in include_dirs)}
#: the NVRTC option that includes it before the kernel's first line
OPTION = f"--pre-include={NAME}"


def headers() -> tuple[int, list[bytes], list[bytes]]:
    """``nvrtcCreateProgram``'s (numHeaders, headers, includeNames) for the prelude alone."""
    return 1, [PRELUDE.encode()], [NAME.encode()]

#: identifiers a prelude cannot supply, and what to add (checked in order; first match wins)
_HINTS = (
    (r"__half2?|half2?|__float2half\w*|__half2float\w*|__h\w+", "#include <cuda_fp16.h>"),
    (r"__nv_bfloat16\w*|nv_bfloat16\w*|__float2bfloat16\w*|__bfloat162float\w*", "#include <cuda_bf16.h>"),
    (r"__nv_fp8\w*", "#include <cuda_fp8.h>"),
    (r"cub", "#include the CUB header of what the kernel uses, such as <cub/block/block_reduce.cuh> (CUB comes with "
             "the CUDA headers; NVRTC does not take the whole of <cub/cub.cuh>)"),
    (r"cooperative_groups|cg", "#include <cooperative_groups.h> and namespace cg = cooperative_groups;"),
    (r"std", "the host's std:: is not there in NVRTC: use CUDA's own (#include <cuda/std/limits>, "
             "cuda::std::numeric_limits, <cuda/std/type_traits> cuda::std::is_same, cuda::std::min) or the device "
             "functions (expf, fminf, fmaxf, ...)"),
    (r"printf|fprintf|malloc|free", "kernels may not print or allocate here: remove the call"),
    (r"float[1-4]|int[1-4]|uint[1-4]|make_float[1-4]|make_int[1-4]",
     "vector types come with the CUDA headers: make sure nothing #undefs them; with NVRTC they are built in"),
    (r"WARP_SIZE|warpSize_?|BLOCK_SIZE|TILE_DIM|NUM_THREADS|THREADS",
     "a constant of the project the kernel comes from: add #define {name} VALUE to the kernel, or declare it "
     "as a tunable (// kforge: tune {name} = [...])"),
)
_UNDEFINED_NAME = re.compile(r'identifier "([A-Za-z_]\w*)" is undefined')


def hint_for(log: str) -> str | None:
    """What to add for the first undefined identifier in NVRTC's ``log`` that the prelude cannot
    supply (None when there is no such error or nothing is known about the name)."""
    for m in _UNDEFINED_NAME.finditer(log):
        name = m.group(1)
        for pattern, hint in _HINTS:
            if re.fullmatch(pattern, name):
                return f"{name} is undefined: " + hint.format(name=name)
        if name.isupper():
            return (f"{name} is undefined: nvcc's implicit names (INFINITY, M_PI, FLT_MAX, int64_t, ...) are "
                    f"supplied, but {name} is not one of them: define it in the kernel (#define {name} VALUE) or "
                    "include the header it comes from")
    if "cub/cub.cuh" in log and "NVRTC" in log:
        return ("<cub/cub.cuh> is not for NVRTC: include the header of each CUB part the kernel uses instead, such "
                "as <cub/block/block_reduce.cuh>, <cub/block/block_scan.cuh> or <cub/warp/warp_reduce.cuh>")
    if ("std::" in log or 'namespace "std" has no member' in log) and "namespace" in log:
        return _HINTS[5][1]
    return None
