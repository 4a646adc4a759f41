"""A reference a model wrote runs in the sandbox (issue 35, S3); one the user wrote runs as before.

Each hostile reference below is run twice: in a manifest with a ``$.generated`` block (the
sandbox: nothing leaves it) and in the same manifest without it (the plain reference process: it
does what it says), which shows that each check could fail.  A test that needs a layer the
kernel refuses here skips, naming the layer and why; the always-on layers (environment, private
folder, limits) are asserted everywhere.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.common.errors import ReferenceError_
from kernel_forge.common.sandbox import Limits, scrubbed_env
from kernel_forge.model import reference_process as rp
from kernel_forge.model.task import load_task

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the sandboxed child is started this way on POSIX only")

BLOCK = {"tool": "kforge init --describe (test)", "model": "scripted:model", "description": "a probe",
         "prompt_sha256": "0" * 64, "created": "2026-12-04T00:00:00Z", "exchange": "probe_describe", "files": {},
         "witness": "probe_witness.cu", "crosscheck": {"status": "pending", "detail": "not run"}, "lint": [],
         "accepted": False, "accepted_by": None, "accepted_at": None}
HEAD = "import os, socket, subprocess, sys\nimport numpy as np\n\n\ndef reference(x, y, n):\n"


def probe(folder: Path, body: str, generated: bool = True):
    """A task ``probe(x, y, n)`` whose reference runs ``body`` (indented, ``y`` has 4 elements)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe_reference.py").write_text(HEAD + "".join(f"    {line}\n" for line in body.strip().splitlines()))
    manifest = {"name": "probe", "description": "a probe",
                "signature": 'extern "C" __global__ void probe(const float* x, float* y, int n)',
                "reference": {"python": "probe_reference.py:reference"},
                "args": {"x": {"shape": ["n"], "init": {"kind": "normal"}}, "y": {"shape": ["n"], "output": True},
                         "n": "n"},
                "launch": {"grid": ["cdiv(n, 256)"], "block": [256]},
                "cases": [{"name": "four", "role": "correctness", "vars": {"n": 4}},
                          {"name": "eight", "role": "performance", "vars": {"n": 8}}]}
    if generated:
        manifest["generated"] = BLOCK
    (folder / "probe.json").write_text(json.dumps(manifest, indent=2))
    return load_task(folder / "probe.json")


def run(task):
    """The reference's output y on case four, or the ReferenceError_ it raised."""
    try:
        return rp.reference_outputs(task, task.case("four"), 1)["y"]
    except ReferenceError_ as exc:
        return exc


@pytest.fixture(autouse=True)
def fresh_children():
    """Every test starts its children afresh (an idle one keeps the environment it started with)."""
    rp.shutdown()
    yield
    rp.shutdown()


@pytest.fixture(scope="module")
def layers(tmp_path_factory):
    """{layer: (holds, detail)} of the sandbox on this machine."""
    task = probe(tmp_path_factory.mktemp("layers"), "y[...] = 1")
    assert np.array_equal(run(task), np.ones(4, np.float32))
    found = {x.name: (x.active, x.detail) for x in rp.sandbox_layers(task)}
    rp.shutdown()
    return found


def need(layers, *names: str) -> None:
    """Skip unless one of ``names`` holds here, saying why each is off."""
    if not any(layers.get(n, (False,))[0] for n in names):
        pytest.skip("no sandbox layer here to stop it: " + "; ".join(f"{n}: {layers.get(n, (False, 'absent'))[1]}"
                                                                       for n in names))


# ------------------------------------------------------------------------------ always on

def test_the_sandbox_reports_its_layers_and_always_scrubs_the_environment_and_keeps_a_private_folder_and_limits(
        tmp_path, layers):
    for name in ("environment", "folder", "limits"):
        assert layers[name][0], (name, layers[name])
    assert f"{Limits().file_size >> 20} MiB files" in layers["limits"][1]
    body = f"""
import resource
y[0] = os.getcwd() == os.environ["HOME"] == os.environ["TMPDIR"] != {str(tmp_path)!r}
y[1] = resource.getrlimit(resource.RLIMIT_FSIZE)[0] == {Limits().file_size}
y[2] = resource.getrlimit(resource.RLIMIT_CPU)[0] == {Limits().cpu_s}
y[3] = not ("" in sys.path or {str(tmp_path)!r} in sys.path or os.getcwd() in sys.path)
"""
    task = probe(tmp_path, body)
    assert run(task).tolist() == [1, 1, 1, 1]
    folder = next(x.detail for x in rp.sandbox_layers(task) if x.name == "folder").split("private: ")[1]
    assert Path(folder).is_dir()
    rp.shutdown()
    assert not Path(folder).exists()               # the private folder goes with its child
    # the user's own manifest: the plain child, as before (its folder is the user's, limits are not set)
    mine = probe(tmp_path / "mine", body, generated=False)
    assert run(mine).tolist() != [1, 1, 1, 1] and rp.sandbox_layers(mine) is None


def test_a_generated_reference_sees_no_api_key_in_its_environment(tmp_path, monkeypatch):
    secret = "sk-planted-" + uuid.uuid4().hex
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, secret)
    body = f"""
y[0] = sum(len(os.environ.get(k, "")) for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"))
y[1] = any({secret!r} in v for v in os.environ.values())
try:
    y[2] = {secret!r}.encode() in open("/proc/self/environ", "rb").read()
except OSError:
    y[2] = 0
y[3] = len(os.environ)
"""
    sandboxed = run(probe(tmp_path, body))
    assert sandboxed[:3].tolist() == [0, 0, 0] and sandboxed[3] <= len(scrubbed_env("/x"))
    plain = run(probe(tmp_path / "mine", body, generated=False))
    assert plain[0] == 3 * len(secret) and plain[1] == 1          # the user's own reference sees them


# ------------------------------------------------------------------------------ where Linux permits

@pytest.mark.parametrize("spawn", [
    'import numpy.f2py.f2py2e as f\nf.os.popen("id > {marker}").read()',
    'subprocess.run(["sh", "-c", "id > {marker}"])',
    'os.system("id > {marker}")',
], ids=["f2py-os-popen", "subprocess", "os-system"])
def test_a_generated_reference_that_spawns_a_process_leaves_no_marker(tmp_path, layers, spawn):
    need(layers, "landlock", "seccomp")
    marker = tmp_path / "marker"
    source = "try:\n" + "".join(f"    {line}\n" for line in spawn.format(marker=marker).splitlines()) + \
             "except OSError:\n    pass\ny[...] = 1"
    run(probe(tmp_path / "generated", source))
    assert not marker.exists()
    run(probe(tmp_path / "mine", source, generated=False))
    assert marker.exists() and "uid=" in marker.read_text()       # unsandboxed, it ran


@pytest.mark.parametrize("write", ["x.dump({path!r})", "open({path!r}, 'w').write('leak')"],
                         ids=["ndarray-dump", "open-home"])
def test_a_generated_reference_that_writes_outside_its_folder_fails_and_writes_nothing(tmp_path, layers,
                                                                                      monkeypatch, write):
    need(layers, "landlock")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    path = f"/tmp/kforge-outside-{uuid.uuid4().hex}" if "dump" in write else str(home / "planted.txt")
    source = write.format(path=path) + "\ny[...] = 1"
    try:
        err = run(probe(tmp_path / "generated", source))
        assert isinstance(err, ReferenceError_) and "PermissionError" in err.message
        assert "ran in the sandbox" in (err.hint or "")
        assert not os.path.exists(path)
        run(probe(tmp_path / "mine", source, generated=False))
        assert os.path.exists(path)                                 # unsandboxed, it wrote
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_a_generated_reference_cannot_open_a_socket_to_a_loopback_listener(tmp_path, layers):
    need(layers, "namespaces", "seccomp", "landlock")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(2)
    port = listener.getsockname()[1]
    source = f"""
try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
    s.sendall(b"leak")
    y[...] = 1
except OSError:
    y[...] = 0
"""
    try:
        out = run(probe(tmp_path / "generated", source))
        assert out.tolist() == [0, 0, 0, 0]
        with pytest.raises(socket.timeout):
            listener.accept()                                       # nobody connected
        assert run(probe(tmp_path / "mine", source, generated=False)).tolist() == [1, 1, 1, 1]
        conn, _ = listener.accept()                                 # unsandboxed, it connected
        conn.close()
    finally:
        listener.close()


def test_each_linux_layer_holds_here_or_says_why_not(layers):
    """On Linux every layer is either on or off with the kernel's reason (never silently absent)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("namespaces, Landlock and seccomp are Linux layers")
    for name in ("namespaces", "landlock", "seccomp"):
        holds, detail = layers[name]
        assert detail, name
        if not holds:
            assert "errno" in detail or "not" in detail or "no " in detail, detail


def test_a_generated_reference_cannot_run_code_in_kforge_through_a_pickle_on_its_pipe(tmp_path):
    """The sandboxed child's messages are JSON: a pickle it writes to its own end of the pipe is
    refused, never unpickled in kforge's process (where it would run outside the sandbox)."""
    marker = tmp_path / "marker"
    source = f"""
import json, pickle
from multiprocessing.connection import Connection
class Evil:
    def __reduce__(self):
        return (os.system, ("touch {marker}",))
fd = json.loads(sys.argv[2])["fd"] if len(sys.argv) > 2 else None
if fd is not None:
    Connection(fd).send_bytes(pickle.dumps(("ok", Evil())))
    import time
    time.sleep(5)
y[...] = 1
"""
    err = run(probe(tmp_path, source))
    assert isinstance(err, ReferenceError_) and "not kforge's" in err.message
    assert not marker.exists()


@pytest.mark.parametrize("announced", [[["y", [1 << 40], "<f4"]], [["y", [4], "|O"]], [["z", [4], "<f4"]]],
                         ids=["a-terabyte", "python-objects", "another-output"])
def test_outputs_a_generated_reference_announces_on_its_pipe_are_checked_before_anything_is_allocated(
        tmp_path, announced):
    source = f"""
import json
from multiprocessing.connection import Connection
fd = json.loads(sys.argv[2])["fd"] if len(sys.argv) > 2 else None
if fd is not None:
    Connection(fd).send_bytes(json.dumps(["ok", {announced!r}]).encode())
    import time
    time.sleep(5)
y[...] = 1
"""
    err = run(probe(tmp_path, source))
    assert isinstance(err, ReferenceError_), err
    assert "the sandboxed reference process sent" in err.message and ("numeric values" in err.message
                                                                       or "not ['y']" in err.message)


def test_a_generated_reference_writing_past_the_file_size_limit_in_its_own_folder_gets_an_error(tmp_path):
    """Its private folder takes files up to the limit; one byte more is an error (EFBIG), not a kill."""
    size = Limits().file_size
    source = f"""
with open("big", "wb") as f:
    f.write(bytes({size}))
y[0] = os.path.getsize("big") == {size}
try:
    with open("big", "ab") as f:
        f.write(b"x")
    y[1] = 0
except OSError as exc:
    y[1] = exc.errno == 27
y[2:] = 1
"""
    assert run(probe(tmp_path, source)).tolist() == [1, 1, 1, 1]


def test_a_sandboxed_child_that_cannot_start_is_a_reference_error_and_leaves_no_folder(tmp_path, monkeypatch):
    import tempfile
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))           # where the private folder would be made
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    err = run(probe(tmp_path / "task", "y[...] = 1"))
    assert isinstance(err, ReferenceError_) and "could not be started" in err.message and "no-python" in err.message
    assert list(temp.iterdir()) == []
