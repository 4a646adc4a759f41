"""Tests of kernel_forge/common/linux_sandbox.py: each layer applied to a child process, and why one is refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_forge.common import linux_sandbox as ls

ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces, Landlock and seccomp are Linux's")


def in_child(body: str, *args: str) -> dict:
    """Run ``body`` in a fresh Python (a layer holds for the rest of its process): it applies a layer and
    prints one JSON object; a layer the kernel refuses here skips the test, saying why."""
    code = ("import json, os, socket, subprocess, sys, threading\n"
            "from kernel_forge.common import linux_sandbox as ls\n"
            "try:\n" + "".join(f"    {line}\n" for line in body.strip().splitlines())
            + "except ls.Refused as exc:\n    print(json.dumps({'refused': str(exc)}))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if "refused" in out:
        pytest.skip(f"the kernel refuses this layer here: {out['refused']}")
    return out


def test_off_linux_every_layer_is_refused_saying_so(monkeypatch):
    monkeypatch.setattr(ls.platform, "system", lambda: "Darwin")
    for layer in (ls.unshare_namespaces, ls.landlock_abi, ls.seccomp_filter):
        with pytest.raises(ls.Refused, match=r"^not Linux \(Darwin\)$"):
            layer()


@linux_only
def test_no_seccomp_filter_is_made_for_an_architecture_it_does_not_know(monkeypatch):
    monkeypatch.setattr(ls.platform, "machine", lambda: "riscv64")
    with pytest.raises(ls.Refused, match=r"^no seccomp filter for riscv64$"):
        ls.seccomp_filter()                  # refused before anything is applied to this process


@linux_only
def test_under_the_seccomp_filter_threads_start_but_no_process_program_or_socket_does():
    out = in_child("""
said = ls.seccomp_filter()
found = {"said": said}
ran = []
t = threading.Thread(target=lambda: ran.append(1))
t.start()
t.join()
found["thread"] = ran == [1]
for name, attempt in (("fork", os.fork), ("exec", lambda: subprocess.run(["/bin/true"])),
                      ("socket", lambda: socket.socket())):
    try:
        attempt()
        found[name] = "allowed"
    except OSError as exc:
        found[name] = exc.errno
print(json.dumps(found))
""")
    assert out == {"said": "no exec, fork, socket, ptrace, io_uring", "thread": True,
                   "fork": 1, "exec": 1, "socket": 1}          # each EPERM


@linux_only
def test_under_landlock_the_process_writes_only_in_its_folder_reads_only_what_it_was_given_and_executes_nothing(
        tmp_path):
    mine, other, unreadable = tmp_path / "mine", tmp_path / "other", tmp_path / "unreadable"
    for d in (mine, other, unreadable):
        d.mkdir()
    (unreadable / "secret.txt").write_text("s")
    (other / "open.txt").write_text("o")
    out = in_child("""
mine, other, unreadable = sys.argv[1:4]
python = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
abi = ls.landlock_abi()
said = ls.landlock(python + [other], [mine])
found = {"abi": abi, "said": said}
def attempt(name, f):
    try:
        f()
        found[name] = "allowed"
    except OSError as exc:
        found[name] = exc.errno
attempt("write mine", lambda: open(os.path.join(mine, "a"), "w").write("x"))
attempt("write other", lambda: open(os.path.join(other, "a"), "w").write("x"))
attempt("read other", lambda: open(os.path.join(other, "open.txt")).read())
attempt("read unreadable", lambda: open(os.path.join(unreadable, "secret.txt")).read())
attempt("exec", lambda: subprocess.run([sys.executable, "-c", "pass"]))
print(json.dumps(found))
""", str(mine), str(other), str(unreadable))
    abi = out.pop("abi")
    said = out.pop("said")
    assert said.startswith(f"ABI {abi}") and ((", no TCP" in said) == (abi >= 4))
    assert out == {"write mine": "allowed", "write other": 13, "read other": "allowed", "read unreadable": 13,
                   "exec": 13}                                  # EACCES where Landlock refuses
    assert (mine / "a").read_text() == "x" and not (other / "a").exists()


@linux_only
def test_in_new_namespaces_the_process_keeps_its_ids_and_has_no_network():
    out = in_child("""
uid = os.geteuid()
kinds = ls.unshare_namespaces()
found = {"kinds": kinds, "same uid": os.geteuid() == uid}
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("127.0.0.1", 9))
    found["connect"] = "connected"
except OSError as exc:
    found["connect"] = exc.errno
print(json.dumps(found))
""")
    assert out["kinds"] in ("user+network+mount", "network+mount") and out["same uid"]
    assert out["connect"] == 101                                # ENETUNREACH: not even loopback is up
