"""Tests of kernel_forge/gpu/disasm.py: nvdisasm found, its version, a CUBIN's SASS, NVRTC's PTX."""
from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path

import pytest

from kernel_forge.common.errors import CompileError, EnvironmentProblem
from kernel_forge.gpu import disasm


def fake_tool(path: Path, body: str) -> Path:
    """An executable Python script at ``path`` standing in for nvdisasm."""
    path.write_text(f"#!{sys.executable}\nimport sys\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def found(monkeypatch):
    """KFORGE_NVDISASM set to ``path`` (the lookup's cache cleared before and after)."""
    def use(path):
        monkeypatch.setenv("KFORGE_NVDISASM", str(path))
        disasm._find.cache_clear()
        return disasm.find_nvdisasm()
    yield use
    disasm._find.cache_clear()


def test_kforge_nvdisasm_names_the_tool_and_a_missing_file_is_no_tool(found, tmp_path):
    tool = fake_tool(tmp_path / "nvdisasm", "")
    assert found(tool) == str(tool)
    assert found(tmp_path / "no-such-nvdisasm") is None            # not PATH's nor the wheel's instead


def test_the_version_is_the_v_token_of_its_version_text(tmp_path):
    tool = fake_tool(tmp_path / "nvdisasm", """
        print("nvdisasm: NVIDIA (R) CUDA disassembler")
        print("Copyright (c) 2005-2026 NVIDIA Corporation")
        print("Cuda compilation tools, release 13.0, V13.0.88")
    """)
    assert disasm.nvdisasm_version(str(tool)) == "13.0.88"
    assert disasm.nvdisasm_version(str(fake_tool(tmp_path / "quiet", 'print("no version here, Vx")'))) == ""
    assert disasm.nvdisasm_version(str(tmp_path / "absent")) == ""


def test_sass_runs_the_tool_on_the_cubin_code_sections_only(tmp_path):
    tool = fake_tool(tmp_path / "nvdisasm", """
        print("args:", sys.argv[1], sys.argv[2].endswith("kernel.cubin"))
        print(open(sys.argv[2], "rb").read().decode())
    """)
    assert disasm.sass(b"\x7fELF-the-cubin", nvdisasm=str(tool)) == "args: -c True\n\x7fELF-the-cubin\n"


def test_a_failing_or_missing_nvdisasm_is_an_environment_problem_saying_what_to_do(tmp_path, monkeypatch):
    tool = fake_tool(tmp_path / "nvdisasm", """
        sys.stderr.write("nvdisasm fatal   : Input file is not a valid ELF\\n")
        sys.exit(3)
    """)
    with pytest.raises(EnvironmentProblem) as err:
        disasm.sass(b"not a cubin", nvdisasm=str(tool))
    assert err.value.message == "nvdisasm failed (status 3): nvdisasm fatal   : Input file is not a valid ELF"
    monkeypatch.setattr(disasm, "find_nvdisasm", lambda: None)
    with pytest.raises(EnvironmentProblem) as err:
        disasm.sass(b"\x7fELF")
    assert err.value.message == "nvdisasm was not found"
    assert err.value.hint == 'pip install "cuda-toolkit[nvdisasm]" (or set KFORGE_NVDISASM)'


def test_ptx_is_nvrtc_s_output_for_the_arch_with_the_defines():
    text = disasm.ptx('extern "C" __global__ void k(int* c) { c[0] = N; }', arch="sm_90", defines={"N": 7})
    assert ".target sm_90" in text and ".visible .entry k(" in text
    assert "7;" in text                                              # N became the constant 7
    with pytest.raises(CompileError):
        disasm.ptx('extern "C" __global__ void k(int* c) { c[0] = N; }', arch="sm_90")     # N undefined
