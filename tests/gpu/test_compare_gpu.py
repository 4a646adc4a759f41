"""GPU output checks (kernel_forge/gpu/compare.py) against the specification (verify.compare).

CPU tests: every comparison kernel compiles with NVRTC and is named kf_*.  GPU tests: for every
stored type, with NaN, ±Inf, poison, values at and beyond the tolerance, the GPU summary equals
verify.compare's, field for field (the JSON of both), and the expected copy is fingerprinted.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from kernel_forge.common.dtypes import BY_NAME, poison_value
from kernel_forge.gpu.compare import OPTIONS, kernel_source
from kernel_forge.model.task import Tolerance
from kernel_forge.model.tolerance import compare, device_expected, exact

from tests.support.planted_outputs import planted

DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "uint8", "int8", "int16", "uint16",
          "uint32", "int64", "uint64"]


def _kinds(dtype, tol):
    return [("float32", False), ("float64", False)] if not exact(dtype, tol) else \
        [("uint64" if dtype.name == "uint64" else "int64", True)]


@pytest.mark.parametrize("name", DTYPES)
def test_every_comparison_kernel_compiles_and_is_named_kf(name):
    from kernel_forge.gpu.nvrtc import compile_source

    dtype = BY_NAME[name]
    for tol in (Tolerance(1e-3, 1e-3), Tolerance(0, 0)):
        for expected, mode in _kinds(dtype, tol):
            kname, src = kernel_source(dtype, expected, mode)
            assert kname.startswith("kf_compare_")
            assert compile_source(src, arch="sm_90", extra_options=OPTIONS).cubin


@pytest.mark.gpu
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("tol", [Tolerance(1e-3, 1e-3), Tolerance(0, 0), Tolerance(2, 0), Tolerance(0, 1e-2)],
                         ids=["atol+rtol", "exact", "atol", "rtol"])
@pytest.mark.parametrize("n", [1, 257, 100_003])
def test_gpu_summary_equals_the_specification(name, tol, n):
    import cupy

    from kernel_forge.gpu.compare import compare_on_gpu

    dtype = BY_NAME[name]
    if dtype.kind == "float" and tol.atol == 0 and tol.rtol == 0:
        tol = Tolerance(0, 0)          # floats compared with no tolerance at all: still the same rule
    actual, ref = planted(dtype, n, seed=n, tol=tol)
    with np.errstate(all="ignore"):
        want = compare("y", actual.reshape(-1, 1) if n > 1 else actual, ref, dtype, tol, max_report=7)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.asarray(actual.reshape(-1, 1) if n > 1 else actual)
        e = cupy.asarray(device_expected(ref, dtype, tol))
        got = compare_on_gpu("y", a, e, dtype, tol, stream, max_report=7, reference_dtype=ref.dtype)
    assert json.dumps(got.to_json()) == json.dumps(want.to_json()), (got, want)


@pytest.mark.gpu
def test_gpu_compare_of_a_large_passing_output_and_its_poisoned_twin():
    import cupy

    from kernel_forge.common.dtypes import FLOAT32
    from kernel_forge.gpu.compare import compare_on_gpu

    n = 1 << 24
    ref = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    tol = Tolerance(1e-6, 1e-6)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.asarray(ref)
        e = cupy.asarray(device_expected(ref, FLOAT32, tol))
        ok = compare_on_gpu("c", a, e, FLOAT32, tol, stream)
        a[n // 3:] = cupy.float32(poison_value(FLOAT32))
        bad = compare_on_gpu("c", a, e, FLOAT32, tol, stream)
    assert ok.ok and ok.max_abs == 0 and ok.tol_ratio == 0
    assert bad.mismatches == bad.unwritten == n - n // 3 and bad.first[0]["index"] == [n // 3]
