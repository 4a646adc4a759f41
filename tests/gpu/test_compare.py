"""The GPU comparison kernels' own arithmetic, built for the host with a C++ compiler and run on
planted data against verify.compare (the specification).  One thread does the whole grid-stride
loop, so the warp shuffles add nothing; no FMA contraction, as on the GPU (--fmad=false).

Skipped where no C++ compiler is installed (kernel_forge itself never needs one); the GPU test
tests/gpu/test_compare_gpu.py checks the same on the device.
"""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess

import numpy as np
import pytest

from kernel_forge.common.dtypes import BY_NAME, poison_bits
from kernel_forge.gpu.compare import kernel_source
from kernel_forge.gpu.mask import host_mask
from kernel_forge.model.task import Tolerance
from kernel_forge.model.tolerance import OutputCheck, compare, device_expected, exact, first_entries, rel_floor

from tests.support.planted_outputs import planted

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler on this machine")

HOST = r'''
#include <cmath>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
struct kf_dim { unsigned x; };
static kf_dim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};
using std::isfinite; using std::isnan; using std::isinf; using std::signbit; using std::ldexp; using std::fabs; using std::fmax;
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline double __longlong_as_double(long long u) { double f; memcpy(&f, &u, 8); return f; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
template <class T> static inline T __shfl_down_sync(unsigned, T, int) { return T(0); }
static inline void atomicAdd(unsigned long long* a, unsigned long long b) { *a += b; }
static inline void atomicMax(unsigned long long* a, unsigned long long b) { if (b > *a) *a = b; }
'''


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kf-compare-host")
    built = {}

    def get(dtype, expected_dtype, exact_mode):
        key = (dtype.name, expected_dtype, exact_mode)
        if key not in built:
            name, src = kernel_source(dtype, expected_dtype, exact_mode)
            cpp, lib = folder / f"{name}.cpp", folder / f"{name}.so"
            cpp.write_text(HOST + src)
            subprocess.run([CXX, "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(lib), str(cpp)], check=True)
            fn = getattr(ctypes.CDLL(str(lib)), name)
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_double, ctypes.c_double,
                           ctypes.c_double, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64,
                           ctypes.c_int]
            built[key] = fn
        return built[key]
    return get


def run_kernel(build, actual, ref, dtype, tol, max_report=7, akey=None, ekey=None) -> OutputCheck:
    """compare_on_gpu's steps, with the kernel run on the host.  ``akey`` / ``ekey``: the stored
    outputs / expected values are handed to the kernel masked with that key (gpu/mask.py)."""
    e = device_expected(ref, dtype, tol)
    a = np.ascontiguousarray(actual).reshape(-1).view(f"u{dtype.itemsize}")
    n = a.size
    a_in = host_mask(a, akey) if akey is not None else a
    e_in = host_mask(e, ekey) if ekey is not None else e
    fn = build(dtype, e.dtype.name, exact(dtype, tol))
    counts, maxes, mask = np.zeros(3, np.uint64), np.zeros(3, np.uint64), np.zeros(n, np.uint8)
    fn(a_in.ctypes.data, e_in.ctypes.data, n, tol.atol, tol.rtol, rel_floor(dtype, tol), poison_bits(dtype), 1,
       counts.ctypes.data, maxes.ctypes.data, mask.ctypes.data, 1, akey or 0, akey is not None, ekey or 0,
       ekey is not None)
    n_bad, unwritten, nonfinite = (int(x) for x in counts)
    max_abs, max_rel, ratio = (float(x) for x in maxes.view(np.float64))
    first = []
    if n_bad:
        idx = np.flatnonzero(mask)[:max_report]
        first = first_entries(idx, a[idx].view(dtype.numpy), e[idx].astype(np.asarray(ref).dtype), dtype, actual.shape)
        if nonfinite:
            max_abs = float("inf")
    return OutputCheck("y", n_bad == 0, n, n_bad, unwritten, nonfinite, max_abs, max_rel, first, None, ratio)


@pytest.mark.parametrize("name, tol", [
    ("float32", Tolerance(1e-3, 1e-3)), ("float32", Tolerance(0, 0)), ("float16", Tolerance(1e-3, 1e-3)),
    ("bfloat16", Tolerance(0, 1e-2)), ("float64", Tolerance(2, 0)), ("int32", Tolerance(0, 0)),
    ("int64", Tolerance(1e-3, 1e-3)), ("uint8", Tolerance(0, 0)), ("uint64", Tolerance(0, 0)),
], ids=lambda v: getattr(v, "name", None) or f"{v.atol}-{v.rtol}" if not isinstance(v, str) else v)
@pytest.mark.parametrize("n", [1, 257, 100_003])
def test_the_kernels_arithmetic_is_the_specifications(build, name, tol, n):
    dtype = BY_NAME[name]
    actual, ref = planted(dtype, n, seed=n, tol=tol)
    actual = actual.reshape(-1, 1) if n > 1 else actual
    with np.errstate(all="ignore"):
        want = compare("y", actual, ref, dtype, tol, max_report=7)
    got = run_kernel(build, actual, ref, dtype, tol)
    assert json.dumps(got.to_json()) == json.dumps(want.to_json())
    if n > 1:
        assert not want.ok and want.unwritten > 0


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float64", "int64", "uint8"])
def test_masked_outputs_and_expected_values_compare_as_the_plain_ones(build, name):
    """The kernel undoes the keystream element by element (the host keystream is the kernel's,
    compiled here from the same DEVICE source): masked inputs give the plain inputs' summary."""
    dtype = BY_NAME[name]
    tol = Tolerance(0, 0) if name in ("int64", "uint8") else Tolerance(1e-3, 1e-3)
    actual, ref = planted(dtype, 4099, seed=7, tol=tol)
    with np.errstate(all="ignore"):
        want = compare("y", actual, ref, dtype, tol, max_report=7)
        plain = run_kernel(build, actual, ref, dtype, tol)
        masked = run_kernel(build, actual, ref, dtype, tol, akey=0x1234_5678_9ABC_DEF0, ekey=2**64 - 3)
        one_side = run_kernel(build, actual, ref, dtype, tol, ekey=99)
    assert json.dumps(plain.to_json()) == json.dumps(want.to_json())
    assert masked.mismatches == want.mismatches and masked.unwritten == want.unwritten
    assert (masked.max_abs, masked.max_rel, masked.tol_ratio) == (want.max_abs, want.max_rel, want.tol_ratio)
    assert one_side.mismatches == want.mismatches


@pytest.mark.parametrize("name", ["int8", "float16"])
def test_the_kernel_counts_the_poison_as_unwritten_only_where_the_reference_has_another_value(build, name):
    from kernel_forge.common.dtypes import poison_value

    dtype = BY_NAME[name]
    tol = Tolerance(0, 0)
    p = poison_value(dtype)
    ref = np.array([p, 3.0, p, 0.0])
    actual = np.array([p, 3.0, p, p], dtype=dtype.numpy)      # the last one never written
    got = run_kernel(build, actual, ref, dtype, tol)
    want = compare("y", actual, ref, dtype, tol)
    assert (got.mismatches, got.unwritten) == (want.mismatches, want.unwritten) == (1, 1)
