"""Tests of kernel_forge/gate/prepare.py: a candidate's checks before its compile, and the compile."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernel_forge.common.errors import CandidateError, SignatureError
from kernel_forge.gate.preflight import KernelRefused
from kernel_forge.gate.prepare import check_candidate, compile_candidate
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
TASK = load_task(ROOT / "manifests" / "vector_add.json")      # launch: grid [cdiv(n, 256)], block [256]

ENTRY = 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)'
BODY = " {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}\n"


def test_the_launch_is_the_kernel_s_own_header_else_the_manifest_s():
    plain = parse_candidate(ENTRY + BODY, name="plain.cu")
    assert check_candidate(TASK, plain) == TASK.launch
    own = parse_candidate("// kforge: grid = [cdiv(n, 128)]\n// kforge: block = [128]\n" + ENTRY + BODY, name="own.cu")
    assert check_candidate(TASK, own) == own.launch != TASK.launch
    with pytest.raises(CandidateError) as err:
        check_candidate(replace(TASK, launch=None), plain)
    assert str(err.value).startswith('plain.cu: no launch configuration: the manifest has no "launch"')


def test_static_rule_findings_are_refused_naming_the_file_and_at_most_three_of_them():
    includes = "".join(f"#include <{h}>\n" for h in ("cublas_v2.h", "cudnn.h", "cufft.h", "cusparse.h"))
    with pytest.raises(CandidateError) as err:
        check_candidate(TASK, parse_candidate(includes + ENTRY + BODY, name="vendor.cu"))
    msg = str(err.value)
    assert msg.startswith("vendor.cu: line 1: includes a vendor library")
    assert "line 3:" in msg and "cusparse" not in msg and msg.count("; line ") == 2


def test_a_missing_entry_point_and_a_wrong_signature_are_signature_errors_with_the_line():
    with pytest.raises(SignatureError) as err:
        check_candidate(TASK, parse_candidate(ENTRY.replace("vector_add", "vadd") + BODY, name="k.cu"))
    assert err.value.message == 'k.cu: no `__global__ void vector_add(...)` definition found'
    assert err.value.hint == f"the entry point must be: {TASK.signature.text}"
    wide = "// a comment\n" + ENTRY.replace("int n", "long long n") + BODY
    with pytest.raises(SignatureError) as err:
        check_candidate(TASK, parse_candidate(wide, name="k.cu"))
    assert err.value.message == "k.cu:2: parameter 4 (n) is `int64 n`, the task declares `int32 n`"


def test_the_compile_gives_the_worker_s_spec_with_the_kernel_s_defines():
    cand = parse_candidate("// kforge: tune BLOCK = [128, 256]\n// kforge: grid = [cdiv(n, BLOCK)]\n"
                           "// kforge: block = [BLOCK]\n" + ENTRY + BODY, name="proposals/tuned.cu")
    cand = cand.with_defines({"BLOCK": 128})
    spec, record = compile_candidate(TASK, cand, cand.launch, "sm_90")
    assert (spec.kind, spec.label, spec.entry, spec.launch) == ("cuda", "proposals/tuned.cu", "vector_add", cand.launch)
    assert spec.defines == {"BLOCK": 128} and spec.cubin[:4] == b"\x7fELF"
    assert record["arch"] == "sm_90" and record["cubin_bytes"] == len(spec.cubin)


def test_code_the_compiled_rules_refuse_is_a_static_rule_verdict_naming_the_line():
    timer = ENTRY + " {\n    int i = threadIdx.x;\n    if (i == 0 && clock64() == 7) c[0] = 0.0f;\n}\n"
    cand = parse_candidate(timer, name="timer.cu")
    check_candidate(TASK, cand)                       # the text rules do not see it ...
    with pytest.raises(KernelRefused) as err:         # ... the PTX does
        compile_candidate(TASK, cand, TASK.launch, "sm_90")
    assert err.value.reason == "static_rule" and err.value.file == "timer.cu" and err.value.line == 3
    assert "(timer)" in str(err.value)
