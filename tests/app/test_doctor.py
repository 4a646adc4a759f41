"""Tests of kernel_forge/app/doctor.py: what this machine has, in one report that never prints a key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.gpu_probe import gpu_present  # noqa: F401  (used by skipif strings)
from kernel_forge import __version__
from kernel_forge.app import doctor
from kernel_forge.app.cli import cli
from kernel_forge.common.errors import KForgeError

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-ant-secret123"

HAS_NVRTC = True
try:
    import cuda.bindings.nvrtc  # noqa: F401
except ImportError:
    HAS_NVRTC = False

no_gpu = pytest.mark.skipif("gpu_present()", reason="a GPU is present; these check the no-GPU path")

#: the gpu entry collect() makes on an H200-like GPU (round figures)
H200 = {"ok": True, "name": "NVIDIA H200", "arch": "sm_90", "cc": [9, 0], "sms": 132, "memory_bytes": 141 * 2**30,
        "l2_bytes": 60 * 2**20, "driver_version": "13.0", "fp32_peak": 66.9e12, "tensor_peak": 989e12,
        "theoretical_bandwidth": 4.8e12}


@pytest.fixture
def run(monkeypatch):
    monkeypatch.chdir(ROOT)
    runner = CliRunner()

    def _run(*args, env=None):
        return runner.invoke(cli, list(args), env=env, catch_exceptions=False)

    return _run


def no_traceback(result):
    assert "Traceback" not in result.output
    assert "Traceback" not in (result.stderr or "")


@no_gpu
def test_doctor_without_gpu(run):
    r = run("doctor", env={"ANTHROPIC_API_KEY": SECRET, "OPENAI_API_KEY": ""})
    assert r.exit_code == 3
    out = r.output
    assert "GPU      none: no usable NVIDIA GPU" in out
    assert "LLM keys ANTHROPIC_API_KEY set, OPENAI_API_KEY not set" in out
    if HAS_NVRTC:
        from kernel_forge.gpu.nvrtc import nvrtc_version
        assert f"NVRTC    {nvrtc_version()} (archs " in out
    assert "without a GPU these work: kforge validate" in out
    assert SECRET not in out
    no_traceback(r)


def test_doctor_never_prints_key_values(run):
    env = {"ANTHROPIC_API_KEY": SECRET, "OPENAI_API_KEY": "sk-openai-secret456"}
    for args in (("doctor",), ("doctor", "--json")):
        r = run(*args, env=env)
        assert r.exit_code in (0, 3)
        assert SECRET not in r.output and "secret456" not in r.output
    report = json.loads(run("doctor", "--json", env=env).stdout)
    assert report["llm_keys"]["ANTHROPIC_API_KEY"] is True
    assert report["llm_keys"]["OPENAI_API_KEY"] is True
    assert report["kernel_forge"] == __version__


def test_doctor_and_the_no_gpu_hint_name_the_same_commands():
    from kernel_forge.app.doctor import collect, render
    from kernel_forge.common.errors import NO_GPU_COMMANDS, NoGPUError

    hint = NoGPUError("x").hint
    report = collect()
    report["gpu"] = {"ok": False, "error": "no GPU (test)"}      # what a machine without one reports
    text = render(report)
    listed = text.split("without a GPU these work: ", 1)[1].splitlines()[0]
    assert listed == hint.split("commands that work without a GPU: ", 1)[1] == ", ".join(NO_GPU_COMMANDS)


def test_a_machine_with_a_gpu_gets_its_figures_and_no_list_of_gpu_free_commands():
    report = {"kernel_forge": "0.1.0", "python": "3.11.7", "platform": "Linux", "gpu": H200,
              "nvrtc": {"version": "13.5", "archs": [75, 90, 120], "include_dirs": []}, "packages": {"numpy": "2.4.6"},
              "cuda_majors": {"nvrtc": 13, "driver": 13}, "cuda_majors_agree": True, "nvrtc_supports_gpu": True,
              "llm_keys": {"ANTHROPIC_API_KEY": True, "OPENAI_API_KEY": False},
              "compute_sanitizer": "/usr/local/cuda/bin/compute-sanitizer"}
    assert doctor.render(report).splitlines() == [
        "kernel_forge 0.1.0 on Python 3.11.7 (Linux)",
        "GPU      NVIDIA H200 (sm_90), 132 SMs, 141 GiB, L2 60 MiB, driver CUDA 13.0",
        "peaks    fp32 66.9 TFLOP/s, tensor (16-bit) 989 TFLOP/s, memory 4800 GB/s (theoretical)",
        "NVRTC    13.5 (archs 75..120); headers: none found (cuda_fp16.h will fail)",
        "packages numpy 2.4.6",
        "CUDA     majors {'nvrtc': 13, 'driver': 13} -> agree",
        "arch     NVRTC can compile for this GPU",
        "LLM keys ANTHROPIC_API_KEY set, OPENAI_API_KEY not set",
        "sanitizer /usr/local/cuda/bin/compute-sanitizer"]


class _Info:
    def __init__(self, **changes):
        self.d = {**H200, **changes}

    def to_json(self):
        return {k: v for k, v in self.d.items() if k != "ok"}


def test_libraries_newer_than_the_driver_disagree_and_an_arch_nvrtc_lacks_is_said(monkeypatch):
    from kernel_forge.gpu import driver, nvrtc

    monkeypatch.setattr(doctor, "_version", lambda dist: {"cuda-bindings": "13.0.1", "numpy": "2.4.6"}.get(dist))
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: "13.0")
    monkeypatch.setattr(nvrtc, "supported_archs", lambda: [75, 80, 90])
    monkeypatch.setattr(nvrtc, "include_dirs", lambda: ["/cuda/include"])
    monkeypatch.setattr(driver, "device_info", lambda ordinal=0: _Info(driver_version="12.8", cc=[10, 0]))
    r = doctor.collect()
    assert r["packages"] == {"cuda-bindings": "13.0.1", "numpy": "2.4.6"}
    assert r["cuda_majors"] == {"cuda-bindings": 13, "nvrtc": 13, "driver": 12}
    assert r["cuda_majors_agree"] is False and r["nvrtc_supports_gpu"] is False      # cc 10.0 is not in 75..90
    text = doctor.render(r)
    assert "-> DISAGREE: install one extra, [cu12] or [cu13], matching the driver" in text
    assert "arch     NVRTC CANNOT compile for this GPU" in text and "without a GPU" not in text


def test_nvrtc_that_cannot_load_is_reported_not_raised(monkeypatch):
    from kernel_forge.gpu import nvrtc

    def missing():
        raise KForgeError("NVRTC is not installed (pip install cuda-bindings)")
    monkeypatch.setattr(nvrtc, "nvrtc_version", missing)
    r = doctor.collect()
    assert r["nvrtc"] == {"error": "NVRTC is not installed (pip install cuda-bindings)"}
    assert "nvrtc" not in r["cuda_majors"] and "nvrtc_supports_gpu" not in r
    assert "NVRTC    unavailable: NVRTC is not installed (pip install cuda-bindings)" in doctor.render(r)
