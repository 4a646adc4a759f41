"""kforge compile / validate / eval with includes outside the allow-list (issue #35 S1/S2): exit 2
naming the kernel line and the file, never the file's contents, never a traceback."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) not installed")

ROOT = Path(__file__).resolve().parents[2]
SECRET = "TOPSECRET_cli_41aa"


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A working folder with a .env, a secret beside it, and a vector_add task of its own."""
    w = tmp_path / "work"
    (w / "task").mkdir(parents=True)
    (w / ".env").write_text(SECRET + "\n")
    (tmp_path / "token.txt").write_text(SECRET + "\n")
    shutil.copy(ROOT / "references" / "vector_add.py", w / "task" / "vector_add.py")
    shutil.copy(ROOT / "manifests" / "vector_add.cu", w / "task" / "vector_add.cu")
    data = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    data["reference"] = {"python": "vector_add.py:reference"}
    data["baselines"] = {}
    data.pop("templates", None)
    (w / "task" / "vector_add.json").write_text(json.dumps(data))
    monkeypatch.chdir(w)
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    return w


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def clean(r) -> None:
    assert "Traceback" not in r.output and "Traceback" not in (r.stderr or "")
    assert SECRET not in r.output and SECRET not in (r.stderr or "")


def kernel_with(work: Path, lines: str) -> Path:
    body = (ROOT / "manifests" / "vector_add.cu").read_text()
    p = work / "leak.cu"
    p.write_text(lines + body)
    return p


def test_compile_refuses_a_digraph_include_of_a_file_outside_with_exit_2(work):
    token = work.parent / "token.txt"
    p = kernel_with(work, f'__device__ int leak[] = {{\n%:include "{token}"\n}};\n')
    r = run("compile", str(p), "--arch", "sm_90")
    assert r.exit_code == 2
    assert "leak.cu: line 2:" in r.stderr and str(token) in r.stderr
    clean(r)


def test_compile_refuses_an_include_of_dot_env_with_exit_2(work):
    p = kernel_with(work, '#include ".env"\n')
    r = run("compile", str(p), "--arch", "sm_90")
    assert r.exit_code == 2 and "line 1" in r.stderr and str(work / ".env") in r.stderr
    clean(r)


def test_compile_takes_the_tasks_named_headers_with_manifest(work):
    data = json.loads((work / "task" / "vector_add.json").read_text())
    data["headers"] = ["common.cuh"]
    (work / "task" / "vector_add.json").write_text(json.dumps(data))
    (work / "task" / "common.cuh").write_text("#define KF_SCALE 1.0f\n")
    p = kernel_with(work, '#include "common.cuh"\n')
    r = run("compile", str(p), "--arch", "sm_90", "--manifest", str(work / "task" / "vector_add.json"))
    assert r.exit_code == 0, r.output
    without = run("compile", str(p), "--arch", "sm_90")
    assert without.exit_code == 2 and 'cannot open source file "common.cuh"' in without.stderr


def test_validate_refuses_an_initial_kernel_that_includes_dot_env(work):
    (work / "task" / "vector_add.cu").write_text('__device__ int leak[] = {\n#include ".env"\n};\n'
                                                 + (ROOT / "manifests" / "vector_add.cu").read_text())
    r = run("validate", str(work / "task" / "vector_add.json"))
    assert r.exit_code == 2, r.output
    assert "line 2" in r.output + r.stderr and str(work / ".env") in r.output + r.stderr
    clean(r)


def test_validate_refuses_a_header_symlinked_out_of_the_task_folder(work):
    data = json.loads((work / "task" / "vector_add.json").read_text())
    data["headers"] = ["secret.cuh"]
    (work / "task" / "vector_add.json").write_text(json.dumps(data))
    (work / "task" / "secret.cuh").symlink_to(work.parent / "token.txt")
    r = run("validate", str(work / "task" / "vector_add.json"))
    assert r.exit_code == 2
    assert "$.headers[0]" in r.output + r.stderr and "outside the task's folder" in r.output + r.stderr
    clean(r)


def test_eval_refuses_a_kernel_with_a_line_continuation_include_before_any_gpu(work):
    p = kernel_with(work, f'__device__ int leak[] = {{\n#inc\\\nlude "{work / ".env"}"\n}};\n')
    r = run("eval", str(work / "task" / "vector_add.json"), str(p), "--arch", "sm_90")
    assert r.exit_code == 2, r.output
    assert "line 3" in r.output + r.stderr
    clean(r)


def test_mcp_eval_kernel_answers_a_refused_include_with_an_error_naming_the_line(work):
    from kernel_forge.app.mcp_server import Service
    from kernel_forge.common.errors import IncludeRefused

    source = '__device__ int leak[] = {\n%:include ".env"\n};\n' + (ROOT / "manifests" / "vector_add.cu").read_text()
    with pytest.raises(IncludeRefused) as info:      # the server's call() turns it into an MCP ToolError
        Service(work / "runs").eval_kernel(str(work / "task" / "vector_add.json"), source=source, arch="sm_90")
    assert "line 2" in str(info.value) and str(work / ".env") in str(info.value)
    assert SECRET not in str(info.value) and info.value.exit_code == 2
