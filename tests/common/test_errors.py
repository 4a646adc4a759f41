"""Tests of kernel_forge/common/errors.py: the exception hierarchy, its messages and exit codes."""
from __future__ import annotations

import pytest

from kernel_forge.app.cli_common import handle_errors
from kernel_forge.common.errors import (NO_GPU_COMMANDS, CandidateError, CaseFailed, CudaError, EnvironmentProblem,
                                        ExpressionError, IncludeRefused, InputError, InternalError, KForgeError,
                                        ManifestError, NoGPUError, SignatureError, caused_by_interrupt)


def test_each_kind_of_error_has_its_exit_code():
    codes = {cls: cls("x").exit_code for cls in (KForgeError, InputError, ManifestError, IncludeRefused,
                                                 EnvironmentProblem, InternalError, CaseFailed)}
    assert codes == {KForgeError: 2, InputError: 2, ManifestError: 2, IncludeRefused: 2, EnvironmentProblem: 3,
                     InternalError: 4, CaseFailed: 1}
    assert NoGPUError("x").exit_code == CudaError("cuInit", "CUDA_ERROR_NO_DEVICE").exit_code == 3


def test_a_hint_goes_on_its_own_line_after_the_message():
    assert str(InputError("bad --reps")) == "bad --reps"
    e = InputError("bad --reps", hint="give a whole number")
    assert str(e) == "bad --reps\n  hint: give a whole number" and e.message == "bad --reps"


def test_a_manifest_error_names_the_file_and_the_json_path_first():
    e = ManifestError("must be at least 1, got 0", file="task.json", json_path="$.cases[2].vars.n")
    assert str(e) == "task.json: $.cases[2].vars.n: must be at least 1, got 0"
    assert (e.file, e.json_path) == ("task.json", "$.cases[2].vars.n")
    assert str(ManifestError("no cases")) == "$: no cases"           # no file: the path alone, the root by default


def test_a_candidate_error_names_the_file_and_line_and_a_caret_points_into_an_expression_or_signature():
    assert str(CandidateError("unknown header", file="k.cu", line=3)) == "k.cu:3: unknown header"
    assert str(CandidateError("no entry point", file="k.cu")) == "k.cu: no entry point"
    assert str(CandidateError("no entry point")) == "no entry point"
    e = ExpressionError("unknown variable 'm'", expression="cdiv(m, 256)", column=5)
    assert str(e) == "unknown variable 'm' in expression 'cdiv(m, 256)'\n    cdiv(m, 256)\n         ^"
    assert str(ExpressionError("empty", expression="")) == "empty in expression ''"
    s = SignatureError("unsupported type", signature="void k(long n)", column=7, hint="use long long")
    assert str(s) == "unsupported type\n    void k(long n)\n           ^\n  hint: use long long"


def test_a_cuda_error_names_the_call_and_the_driver_s_code_and_no_gpu_lists_what_works_without_one():
    assert str(CudaError("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory")) == \
        "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
    assert str(CudaError("cuInit", "CUDA_ERROR_NO_DEVICE")) == "cuInit failed: CUDA_ERROR_NO_DEVICE"
    e = NoGPUError("cuInit failed")
    assert e.message == "no usable NVIDIA GPU: cuInit failed"
    assert e.hint == "commands that work without a GPU: " + ", ".join(NO_GPU_COMMANDS)
    # a run and an evaluation need the GPU; a dry run does not
    assert "kforge optimize --dry-run" in NO_GPU_COMMANDS and not {"kforge optimize", "kforge eval"} & set(NO_GPU_COMMANDS)


def test_an_interrupt_is_found_however_deep_in_the_chain_and_a_cycle_ends_the_search():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ValueError("while handling it")              # __context__: the interrupt
    except ValueError as exc:
        outer = RuntimeError("wrapped")
        outer.__cause__ = exc
    assert caused_by_interrupt(outer)
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a                          # a cycle with no interrupt in it
    assert not caused_by_interrupt(a)


def test_an_interrupt_wrapped_by_python_is_still_an_interrupt():
    """Ctrl-C while a dataclass is being created reaches kforge as Python 3.11's RuntimeError
    ("Error calling __set_name__ ...") caused by the KeyboardInterrupt: it is an interrupt (exit
    130), not an internal error; an unrelated RuntimeError is not."""
    from kernel_forge.common.errors import caused_by_interrupt

    def wrapped():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'seeds'") from ki

    with pytest.raises(RuntimeError) as info:
        wrapped()
    assert caused_by_interrupt(info.value) and caused_by_interrupt(KeyboardInterrupt())
    assert not caused_by_interrupt(RuntimeError("no"))

    @handle_errors
    def command():
        wrapped()

    with pytest.raises(SystemExit) as out:
        command()
    assert out.value.code == 130
