"""Tests of kernel_forge/common/sandbox.py: the sandbox's environment, read paths, limits and its report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import kernel_forge
from kernel_forge.common import linux_sandbox, sandbox
from kernel_forge.common.sandbox import ENV_SET, Layer, Limits, enter_namespaces, read_paths, scrubbed_env, summary

ROOT = Path(__file__).resolve().parents[2]


def test_the_environment_is_an_allow_list_with_the_private_folder_as_home_and_temp(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    env = scrubbed_env("/tmp/private")
    assert "ANTHROPIC_API_KEY" not in env and "PYTHONPATH" not in env and "LC_ALL" not in env
    assert env["LANG"] == "C.UTF-8" and env["PATH"] == os.defpath
    assert {k: env[k] for k in ("HOME", "TMPDIR", "TEMP", "TMP")} == dict.fromkeys(("HOME", "TMPDIR", "TEMP", "TMP"),
                                                                                   "/tmp/private")
    assert {k: env[k] for k in ENV_SET} == ENV_SET and env["OMP_NUM_THREADS"] == "1"


def test_what_the_sandbox_may_read_is_python_kernel_forge_the_system_libraries_and_the_reference():
    paths = read_paths("/tasks/t/t_reference.py")
    assert "/tasks/t/t_reference.py" in paths and sys.prefix in paths and "/usr/lib" in paths
    assert os.path.dirname(os.path.abspath(kernel_forge.__file__)) in paths
    assert paths == sorted(set(paths)) and "" not in paths


def test_the_report_names_the_layers_that_hold_then_those_that_are_off_and_why():
    on = [Layer("landlock", True, "ABI 7"), Layer("limits", True, "3600 CPU s")]
    off = Layer("seccomp", False, "seccomp: Operation not permitted (errno 1)")
    assert on[0].describe() == "landlock (ABI 7)" and off.describe() == "seccomp off: seccomp: Operation not permitted (errno 1)"
    assert summary([on[0], off, on[1]]) == ("sandbox: landlock (ABI 7); limits (3600 CPU s) | seccomp off: seccomp: "
                                            "Operation not permitted (errno 1)")
    assert summary(on) == "sandbox: landlock (ABI 7); limits (3600 CPU s)"


def test_namespaces_the_kernel_refuses_are_a_layer_that_is_off_with_the_reason(monkeypatch):
    monkeypatch.setattr(linux_sandbox, "unshare_namespaces", lambda: "user+network+mount")
    assert enter_namespaces() == Layer("namespaces", True, "user+network+mount, no network")

    def refused():
        raise linux_sandbox.Refused("unshare: Operation not permitted (errno 1)")
    monkeypatch.setattr(linux_sandbox, "unshare_namespaces", refused)
    assert enter_namespaces() == Layer("namespaces", False, "unshare: Operation not permitted (errno 1)")


def test_off_linux_only_the_limits_apply_and_the_report_says_why(monkeypatch):
    monkeypatch.setattr(sandbox, "sys", SimpleNamespace(platform="darwin"))
    monkeypatch.setattr(sandbox, "set_limits", lambda limits: Layer("limits", True, f"{limits.cpu_s} CPU s"))
    assert sandbox.confine("/tmp/private", [], Limits(cpu_s=5)) == [
        Layer("limits", True, "5 CPU s"), Layer("namespaces, landlock, seccomp", False, "Linux only (this is darwin)")]


@pytest.mark.skipif(os.name != "posix", reason="resource limits are POSIX")
def test_the_limits_are_set_soft_and_hard_in_the_process_that_asks():
    code = ("import json, resource\nfrom kernel_forge.common.sandbox import Limits, set_limits\n"
            "layer = set_limits(Limits(cpu_s=100, address_space=8 << 30, file_size=1 << 20, processes=0))\n"
            "got = {n: resource.getrlimit(getattr(resource, n)) for n in ('RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_FSIZE', "
            "'RLIMIT_CORE', 'RLIMIT_NPROC')}\n"
            "print(json.dumps({'active': layer.active, 'detail': layer.detail, 'got': got}))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["got"] == {"RLIMIT_CPU": [100, 100], "RLIMIT_AS": [8 << 30, 8 << 30], "RLIMIT_FSIZE": [1 << 20, 1 << 20],
                          "RLIMIT_CORE": [0, 0], "RLIMIT_NPROC": [0, 0]}
    root = " (not enforced for root)" if os.geteuid() == 0 else ""
    assert out["active"] and out["detail"] == ("100 CPU s, 8 GiB address space, 1 MiB files, no core file, "
                                               f"0 new processes{root}")
