"""Tests of kernel_forge/gpu/failure.py: whose fault a failure in the worker is."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import CudaError
from kernel_forge.gpu.failure import CaseFailure, classify
from kernel_forge.gpu.module_state import HarnessFault
from kernel_forge.model.worker_protocol import Failure


@pytest.mark.parametrize("call, code, want", [
    ("cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE", "cuda"),
    ("cuLaunchCooperativeKernel", "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "cuda"),
    ("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE", "cuda"),
    ("cuMemcpyDtoDAsync(a buffer reset or copy)", "CUDA_ERROR_INVALID_VALUE", "harness"),
    ("cuMemsetD32Async(poisoning an output)", "CUDA_ERROR_INVALID_VALUE", "harness"),
    ("cuMemcpyDtoDAsync(module global restore of g)", "CUDA_ERROR_ILLEGAL_ADDRESS", "cuda"),   # sticky: a crash
    ("cuMemcpyDtoD(module global snapshot)", "CUDA_ERROR_OUT_OF_MEMORY", "out_of_memory"),
])
def test_who_a_cuda_error_is_blamed_on(call, code, want):
    got = classify(CudaError(call, code))
    assert got.kind == want, got
    if code == "CUDA_ERROR_ILLEGAL_ADDRESS":
        assert got.sticky


def test_a_case_failure_is_reported_as_the_failure_it_carries():
    failure = Failure("no_expected", "the reference failed on this case", stage="compare")
    assert classify(CaseFailure(failure), stage="timing") is failure


def test_a_harness_fault_names_what_failed_and_says_it_is_not_the_kernel_s_fault():
    got = classify(HarnessFault("module global snapshot", CudaError("cuMemcpyDtoD", "CUDA_ERROR_INVALID_VALUE")),
                   stage="load")
    assert (got.kind, got.code, got.stage, got.sticky) == ("harness", "CUDA_ERROR_INVALID_VALUE", "load", False)
    assert got.message == ("kernel_forge's own module global snapshot failed (CUDA_ERROR_INVALID_VALUE); "
                           "this is not the kernel's fault")
    plain = classify(HarnessFault("comparison", ValueError("bad shape")))
    assert plain.message.startswith("kernel_forge's own comparison failed (ValueError)")


@pytest.mark.parametrize("exc, kind, code, sticky", [
    (RuntimeError("cudaErrorMemoryAllocation: out of memory"), "out_of_memory", "cudaErrorMemoryAllocation", False),
    (type("OutOfMemoryError", (Exception,), {})("Out of memory allocating 4,194,304 bytes"), "out_of_memory",
     "CUDA_ERROR_OUT_OF_MEMORY", False),
    (RuntimeError("CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure"), "cuda", "CUDA_ERROR_LAUNCH_FAILED", True),
    (RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered"), "cuda",
     "cudaErrorIllegalAddress", True),
    (RuntimeError("an illegal instruction was encountered"), "cuda", "", True),
])
def test_the_error_code_is_read_from_the_text_when_the_exception_has_none(exc, kind, code, sticky):
    got = classify(exc, stage="second launch")
    assert (got.kind, got.code, got.sticky, got.stage) == (kind, code, sticky, "second launch")
    assert got.message.startswith(f"{type(exc).__name__}: {exc}")


def test_an_error_of_the_harness_s_own_call_or_of_python_is_a_harness_error():
    got = classify(CudaError("cuEventRecord", "CUDA_ERROR_INVALID_HANDLE"))
    assert got.kind == "harness" and got.code == "CUDA_ERROR_INVALID_HANDLE"
    assert got.message == ("kernel_forge's own GPU call failed: CudaError: cuEventRecord failed: "
                           "CUDA_ERROR_INVALID_HANDLE; this is not the kernel's fault")
    try:
        {}["missing"]
    except KeyError as exc:
        bug = classify(exc, stage="compare")
    assert bug.kind == "harness" and bug.code == "" and bug.message.startswith("KeyError: 'missing'\nTraceback")
