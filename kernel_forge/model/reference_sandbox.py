"""The reference process in its sandbox (:mod:`kernel_forge.common.sandbox`), for a reference a
model wrote (a task with a ``$.generated`` block).

The same child and the same pipe protocol as every reference process
(:mod:`kernel_forge.model.reference_process`), started differently: on Linux and macOS as a
fresh interpreter (``python -I``: no ``PYTHONPATH``, no user site, no working folder on
``sys.path``) from a scrubbed environment, in a private temporary folder, talking over one end
of a socket pair.  Before it says it is ready, the child enters the namespaces (while it has one
thread), imports NumPy and what the reference process needs, then closes the filesystem
(Landlock), sets its limits and its seccomp filter; the layers that hold travel back with its
``ready`` message.  On Windows the child is started as every reference process is, and scrubs
its environment and changes to its private folder first (the report says only those hold).
The private folder is removed when the child ends.

The child's messages to kforge are JSON (:func:`encode`, :func:`decode`), never a pickle: code in
the sandbox can write to its end of the pipe, and a pickle would run code in kforge's process.
The outputs it announces are checked (:func:`check_outputs`) before kforge allocates them.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from kernel_forge.common.errors import ReferenceError_
from kernel_forge.common.sandbox import Layer, Limits, confine, enter_namespaces, scrubbed_env

#: bytes of the longest message a sandboxed child may send (other than its outputs' bytes)
MAX_MESSAGE = 1 << 20

#: what the fresh interpreter runs: the parent's import path (without its working folder), :func:`child`, then
#: the reference process's loop
BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
        "from kernel_forge.model.reference_sandbox import child; conn, layers = child(sys.argv[2]); "
        "from kernel_forge.model.reference_process import child_main; child_main(conn, layers)")


def import_path() -> list[str]:
    """The parent's ``sys.path`` without its working folder (``''`` or the folder itself), with
    the folder kernel_forge is imported from."""
    import kernel_forge

    cwd = os.path.realpath(os.getcwd())
    root = str(Path(kernel_forge.__file__).resolve().parents[1])
    out = [root]
    for p in sys.path:
        if p and os.path.realpath(p) != cwd and p not in out:
            out.append(p)
    return out


class SandboxedChild:
    """A child interpreter in the sandbox, with the few methods of a ``multiprocessing.Process``
    that :func:`~kernel_forge.common.child_process.stop_child` and the reference process use."""

    def __init__(self, readable: list[str], limits: Limits | None = None):
        self.folder = tempfile.mkdtemp(prefix="kforge-sandbox-")
        self.readable, self.limits = list(readable), limits or Limits()
        parent, self._child_end = socket.socketpair()
        from multiprocessing.connection import Connection
        self.conn = Connection(parent.detach())
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        fd = self._child_end.fileno()
        spec = {"fd": fd, "folder": self.folder, "read": self.readable, "limits": asdict(self.limits)}
        try:
            self.popen = subprocess.Popen([sys.executable, "-I", "-c", BOOT, json.dumps(import_path()), json.dumps(spec)],
                                          env=scrubbed_env(self.folder), cwd=self.folder, pass_fds=(fd,),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        finally:
            self._child_end.close()

    # -- what multiprocessing.Process offers ----------------------------------------------
    def is_alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def join(self, timeout: float | None = None) -> None:
        if self.popen is not None:
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass

    def terminate(self) -> None:
        if self.is_alive():
            self.popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self.popen.kill()

    def cleanup(self) -> None:
        """Remove the private folder (once the child has ended)."""
        if not self.is_alive():
            shutil.rmtree(self.folder, ignore_errors=True)


def child(spec_json: str):
    """The sandboxed child's start (Linux, macOS): confine this process; return its end of the
    pipe and the layers that hold."""
    spec = json.loads(spec_json)
    folder = spec["folder"]
    layers = [Layer("environment", True, "scrubbed to an allow-list"), Layer("folder", True, f"private: {folder}")]
    if sys.platform.startswith("linux"):
        layers.append(enter_namespaces())            # first: user namespaces need a single thread
    import numpy  # noqa: F401  (loaded before the filesystem closes)
    from multiprocessing.connection import Connection
    from kernel_forge.model import inputs, references, task, tolerance  # noqa: F401

    conn = Connection(spec["fd"])
    layers += confine(folder, spec["read"], Limits(**spec["limits"]))
    return conn, layers


def confine_here(folder: str) -> list[Layer]:
    """Windows: what a child started by multiprocessing can still do for itself -- scrub its
    environment and work in its private folder."""
    keep = scrubbed_env(folder)
    os.environ.clear()
    os.environ.update(keep)
    os.chdir(folder)
    return [Layer("environment", True, "scrubbed to an allow-list after the start"),
            Layer("folder", True, f"private: {folder}"),
            Layer("limits, namespaces, landlock, seccomp", False, f"not on {sys.platform}")]


# ------------------------------------------------------------------------------ the messages

def encode(kind: str, body) -> bytes:
    """A sandboxed child's message as JSON: ``ready`` (its layers), ``error`` (five fields),
    ``ok`` (records with ``name``, ``shape``, ``dtype``)."""
    if kind == "ready":
        body = [[x.name, x.active, x.detail] for x in body]
    elif kind == "ok":
        body = [[o.name, list(o.shape), o.dtype] for o in body]
    return json.dumps([kind, body]).encode()


def decode(data: bytes):
    """(kind, body) of a sandboxed child's message; ValueError or TypeError for anything else."""
    kind, body = json.loads(data)
    if kind == "ready":
        return kind, [Layer(str(name), bool(active), str(detail)) for name, active, detail in body]
    if kind == "ok":
        return kind, [(str(name), tuple(int(d) for d in shape), str(dtype)) for name, shape, dtype in body]
    if kind == "error" and isinstance(body, list) and len(body) == 5:
        return kind, [None if x is None else str(x) for x in body]
    raise ValueError(f"not a message of the reference process: {str(kind)[:40]!r}")


def check_outputs(task, inputs, outs: list[tuple], what: str) -> None:
    """What a sandboxed child says it will send, as (name, shape, dtype), must be the task's
    outputs, of their sizes, in a plain numeric dtype, before kforge allocates anything for them."""
    import numpy as np

    want = {a.name: math.prod(task.shape(a, inputs.case)) for a in task.outputs}
    names = [name for name, _, _ in outs]
    if sorted(names) != sorted(want):
        raise ReferenceError_(f"{what}: the sandboxed reference process sent outputs {names}, not {sorted(want)}")
    for name, shape, dtype in outs:
        dt = np.dtype(dtype)                      # TypeError for what is not a dtype
        if dt.hasobject or dt.kind not in "biufc" or math.prod(shape) != want[name]:
            raise ReferenceError_(f"{what}: the sandboxed reference process sent {name} as {dtype} {list(shape)}; "
                                  f"{want[name]} numeric values were expected")
