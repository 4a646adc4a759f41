"""Whose fault a failure in the worker is: the candidate's (a CUDA error of its module, launch or
execution, sticky or not), an out-of-memory, or kernel_forge's own machinery (``harness``).

The worker reports every failure as the :class:`~kernel_forge.model.worker_protocol.Failure` it
is classified as here; the gate's checks turn it into a verdict.
"""
from __future__ import annotations

import traceback

from kernel_forge.common.errors import CudaError
from kernel_forge.gpu import driver
from kernel_forge.gpu.module_state import HarnessFault
from kernel_forge.model.worker_protocol import Failure

__all__ = ["CANDIDATE_CALLS", "CaseFailure", "classify"]


class CaseFailure(Exception):
    """An error seen by the worker, carried as the :class:`Failure` it is reported as."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


#: driver calls whose failure is the candidate's (its module, its launch, its kernel's execution);
#: a non-sticky error of any other call is the harness's own (``harness_error``)
CANDIDATE_CALLS = ("cuLaunchKernel", "cuLaunchCooperativeKernel", "cuModuleLoadData", "cuModuleGetFunction",
                   "kernel execution", "timed launches", "cuFuncSetAttribute")


def classify(exc: BaseException, stage: str = "") -> Failure:
    """What went wrong, as the worker saw it: a CUDA error of the candidate's (and whether it is
    sticky), an OOM, or a fault of the harness's own machinery (a failed snapshot, memset, copy or
    comparison: never blamed on the candidate).  A sticky error is always the candidate's: the
    harness's calls only see it because the candidate's kernel faulted earlier."""
    if isinstance(exc, CaseFailure):
        return exc.failure
    if isinstance(exc, HarnessFault):
        exc_c = exc.cause
        code = getattr(exc_c, "code", "")
        return Failure("harness", f"kernel_forge's own {exc.what} failed ({code or type(exc_c).__name__}); "
                                  "this is not the kernel's fault", code=code, stage=stage)
    text = f"{type(exc).__name__}: {exc}"
    code = exc.code if isinstance(exc, CudaError) else ""
    if not code:
        for token in str(exc).replace(":", " ").split():
            if token.startswith(("CUDA_ERROR_", "cudaError")):
                code = token
                break
    norm = code.upper().replace("CUDAERROR", "CUDA_ERROR_")
    if "OutOfMemory" in type(exc).__name__ or "OUT_OF_MEMORY" in norm or "MEMORYALLOCATION" in norm:
        return Failure("out_of_memory", text, code=code or "CUDA_ERROR_OUT_OF_MEMORY", stage=stage)
    sticky_names = {n.replace("CUDA_ERROR_", "").replace("_", "") for n in driver.STICKY}
    flat = norm.replace("CUDA_ERROR_", "").replace("_", "")
    if code and flat in sticky_names or "illegal" in text.lower():
        return Failure("cuda", text, code=code, sticky=True, stage=stage)
    if isinstance(exc, CudaError) and exc.call.startswith(CANDIDATE_CALLS):
        return Failure("cuda", text, code=code, stage=stage)
    if code:
        return Failure("harness", f"kernel_forge's own GPU call failed: {text}; this is not the kernel's fault",
                       code=code, stage=stage)
    return Failure("harness", text + "\n" + traceback.format_exc(limit=-4), stage=stage)
