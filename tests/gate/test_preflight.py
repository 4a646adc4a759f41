"""Tests of kernel_forge/gate/preflight.py: the checks of a kernel and a task before the GPU probe."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernel_forge.common.errors import ManifestError
from kernel_forge.gate import preflight
from kernel_forge.gate.preflight import KernelRefused, case_needs, check_kernel, check_launch, check_sizes, gib
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
#: a, b, c: n float32 each; cases odd, tiny, n16M, n64M, holdout
TASK = load_task(ROOT / "manifests" / "vector_add.json")
ENTRY = 'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)'
BODY = " {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}\n"
MiB = 2**20


def refused(source: str, **kw) -> KernelRefused:
    with pytest.raises(KernelRefused) as err:
        check_kernel(TASK, parse_candidate(source, name="k.cu"), **kw)
    return err.value


def test_sizes_are_written_in_the_largest_binary_unit_that_fits():
    assert [gib(n) for n in (0, 1023, 1024, 1536, MiB, 3 * MiB, 2**30, 80 * 2**30)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "1.0 MiB", "3.0 MiB", "1.0 GiB", "80.0 GiB"]


def test_a_case_needs_its_buffers_once_on_the_gpu_plus_its_outputs_and_three_times_on_the_host():
    need_gpu, need_host = case_needs(TASK, TASK.case("n16M"))      # a, b, c of 2^24 floats: 64 MiB each
    assert need_gpu == 3 * 64 * MiB + 64 * MiB                       # the kept reference copy of c
    assert need_host == 3 * (3 * 64 * MiB)
    # a host fits a case when the case needs at most half of it
    assert preflight.fits_host(TASK, TASK.case("n16M"), host_bytes=2 * need_host)
    assert not preflight.fits_host(TASK, TASK.case("n16M"), host_bytes=2 * need_host - 2)


def test_a_case_too_large_for_the_gpu_or_the_host_is_refused_naming_it_and_its_largest_buffers():
    with pytest.raises(ManifestError) as err:
        check_sizes(TASK, gpu_bytes=200 * MiB, host_bytes=0, gpu_label="H100")     # n16M needs 256 MiB
    assert err.value.json_path == "$.cases[2]" and err.value.file == str(TASK.path)
    assert ("case 'n16M' needs about 256.0 MiB of GPU memory (buffers: a 64.0 MiB, b 64.0 MiB, c 64.0 MiB), "
            "more than the 200.0 MiB H100 GPU") in str(err.value)
    with pytest.raises(ManifestError) as err:
        check_sizes(TASK, gpu_bytes=None, host_bytes=2 * 2**30)     # n64M: 3 x 768 MiB to draw and check
    assert err.value.json_path == "$.cases[3]" and "case 'n64M' needs about" in str(err.value)
    assert "of host memory to draw and check its inputs" in str(err.value) and "this host's 2.0 GiB" in str(err.value)
    check_sizes(TASK, gpu_bytes=None, host_bytes=0)                 # nothing known: nothing refused


def test_check_kernel_returns_the_entry_line_or_refuses_with_the_verdict_reason():
    assert check_kernel(TASK, parse_candidate("// one\n// two\n" + ENTRY + BODY, name="k.cu")) == 3
    vendor = refused("#include <cublas_v2.h>\n#include <cufft.h>\n" + ENTRY + BODY)
    assert (vendor.reason, vendor.line) == ("static_rule", 1)
    assert str(vendor).startswith("k.cu:1: includes a vendor library") and "(and 1 more)" in str(vendor)
    missing = refused(ENTRY.replace("vector_add", "vadd") + BODY)
    assert missing.reason == "signature_mismatch" and missing.hint == f"the entry point must be: {TASK.signature.text}"
    wrong = refused("\n" + ENTRY.replace("float* c", "double* c") + BODY)
    assert (wrong.reason, wrong.line) == ("signature_mismatch", 2)
    no_setting = refused("// kforge: tune B = [64, 128]\n// kforge: constraint B > 1000\n" + ENTRY + BODY)
    assert no_setting.reason == "bad_candidate"
    assert "no setting of its tunables satisfies its constraints" in str(no_setting)
    with pytest.raises(KernelRefused) as err:
        check_kernel(replace(TASK, launch=None), parse_candidate(ENTRY + BODY, name="k.cu"))
    assert err.value.reason == "bad_candidate" and "no launch configuration" in str(err.value)


def test_every_setting_of_the_tunables_is_launched_on_every_case_in_the_check():
    head = "// kforge: tune BLOCK = [256, 2048]\n// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n"
    err = refused(head + ENTRY + BODY)
    assert (err.reason, err.line) == ("launch_config", 2)            # the first launch line of the header
    assert "the launch cannot run on case 'odd' with BLOCK=2048: block [2048, 1, 1] has 2048 threads" in str(err)
    assert err.hint.startswith("exclude the settings that cannot run with `// kforge: constraint ...`")
    ok = parse_candidate(head.replace("2048", "1024") + ENTRY + BODY, name="k.cu")
    check_launch(TASK, ok)
    unknown = parse_candidate("// kforge: grid = [cdiv(n, WIDTH)]\n// kforge: block = [256]\n" + ENTRY + BODY,
                              name="k.cu")
    with pytest.raises(KernelRefused) as e:
        check_launch(TASK, unknown)
    assert e.value.reason == "launch_config"
    assert "the launch of its kforge header does not evaluate on case 'odd'" in str(e.value)


def test_a_template_the_checks_refuse_is_the_manifest_s_error_at_its_place(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text(ENTRY.replace("vector_add", "vadd") + BODY)
    with pytest.raises(ManifestError) as err:
        preflight.check_task_kernels(replace(TASK, templates=(TASK.templates[0], bad)))
    assert err.value.json_path == "$.templates[1]" and err.value.file == str(TASK.path)
    assert 'no `__global__ void vector_add(...)` definition found' in str(err.value)
    preflight.check_task_kernels(TASK)                                # the shipped initial kernel and templates pass


def test_the_static_rules_come_before_nvrtc_and_nvrtc_s_absence_is_explained(monkeypatch):
    from kernel_forge.gpu import nvrtc

    monkeypatch.setattr(nvrtc, "compile_source", lambda *a, **k: pytest.fail("NVRTC saw a refused kernel"))
    with pytest.raises(KernelRefused) as err:
        preflight.compile_kernel(parse_candidate('#include "../secret.h"\n' + ENTRY + BODY, name="k.cu"), "sm_90")
    assert err.value.reason == "static_rule" and "(include_path)" in str(err.value)

    def no_nvrtc():
        raise RuntimeError("libnvrtc.so.13: cannot open shared object file\nmore lines")

    monkeypatch.setattr(nvrtc, "nvrtc_version", no_nvrtc)
    assert preflight.nvrtc_available() == "RuntimeError: libnvrtc.so.13: cannot open shared object file"
