"""Python references run in a child process, bounded in time.

A reference is the user's code.  In kforge's own process an ``os._exit(0)`` in it ended kforge with
exit 0 and no output (which CI reads as a pass), and a hang or a crash had no bound.  So every
Python reference runs in a spawned child (Windows works too) that stays up between calls — one
start per process, not per call: ``validate``, the gate's parent and the weak-case check send it
(task, case, seed), it draws the inputs itself (the draws are seeded, the same bytes as anywhere
else), runs the reference with :func:`~kernel_forge.model.references.guarded_call`, checks that the
expected values are finite, and sends the outputs back as raw bytes.  The parent waits at most
the manifest's ``reference.time_limit_s`` (default :data:`DEFAULT_TIME_LIMIT_S`) per call.  A
hang is killed, an exit or a crash is seen as the pipe closing; each is a
:class:`~kernel_forge.common.errors.ReferenceError_` (exit 2) naming the reference and the case, and the
next call gets a fresh child.  Ctrl-C stops kforge, not the child: the child ignores SIGINT and
is ended by its parent.

Children are pooled: a call takes an idle child or starts one, so concurrent gates (several
GPUs) each have their own, and a child is reused by the next call when it is done.

A reference a model wrote (a task with a ``$.generated`` block) runs in a **sandboxed** child
(:mod:`kernel_forge.model.reference_sandbox`): the same loop and protocol, started from a scrubbed
environment in a private folder, with no network, no writes outside that folder, no new
process and resource limits, as far as the platform allows.  Its inputs are drawn here and sent
(it cannot read a ``.npy`` the manifest names); its pool is kept apart per reference file; the
layers that held are reported by :func:`sandbox_layers`.  A reference in a manifest the user
wrote runs in the plain child.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import tempfile
import threading
from dataclasses import dataclass

import numpy as np

from typing import TYPE_CHECKING

from kernel_forge.common.child_process import start_child, stop_child
from kernel_forge.common.errors import InputError, ManifestError, ReferenceError_

if TYPE_CHECKING:
    from kernel_forge.model.inputs import CaseInputs
    from kernel_forge.model.task import Task

#: seconds a Python reference may take on one case unless the manifest says otherwise
DEFAULT_TIME_LIMIT_S = 120.0
#: bytes per message when outputs come back (a pipe message has an OS-dependent size limit)
CHUNK = 1 << 26
#: idle children kept for the next call
KEEP_IDLE = 4
#: seconds allowed to start a child (spawn, import NumPy and kernel_forge)
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class _Out:
    name: str
    shape: tuple
    dtype: str


# ------------------------------------------------------------------------------ the child

def child_main(conn, layers=None) -> None:
    """The child's loop: one request at a time until the parent closes the pipe or says exit.
    ``layers``: the sandbox's layers (a sandboxed child), sent with ``ready``; a string (Windows)
    is the private folder the child confines itself to first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the parent's to handle
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.references import compute_reference

    if isinstance(layers, str):
        from kernel_forge.model.reference_sandbox import confine_here
        layers = confine_here(layers)
    if layers is None:
        send = conn.send
    else:
        from kernel_forge.model.reference_sandbox import encode
        send = lambda msg: conn.send_bytes(encode(*msg))  # noqa: E731
    send(("ready", layers))
    task = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "exit":
            return
        _op, sent, case_name, seed, inputs = msg
        task = sent if sent is not None else task      # None: the task of the previous request
        try:
            if inputs is None:
                inputs = generate(task, task.case(case_name), seed)
            outputs = compute_reference(task, inputs)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent as data
            known = isinstance(exc, (ReferenceError_, ManifestError, InputError))
            message = getattr(exc, "message", str(exc)) if known else \
                f"the reference process failed on case {case_name!r}: {type(exc).__name__}: {exc}"
            send(("error", (type(exc).__name__ if known else "other", message, getattr(exc, "hint", None),
                            getattr(exc, "file", None), getattr(exc, "json_path", "$"))))
            continue
        arrays = {k: np.ascontiguousarray(v) for k, v in outputs.items()}
        send(("ok", [_Out(k, a.shape, a.dtype.str) for k, a in arrays.items()]))
        for a in arrays.values():
            flat = a.reshape(-1).view(np.uint8)
            for lo in range(0, flat.size, CHUNK):
                conn.send_bytes(flat[lo:lo + CHUNK])


# ------------------------------------------------------------------------------ the parent

class ReferenceProcess:
    """One child running references (see the module docstring)."""

    def __init__(self, sandbox: str | None = None):
        """``sandbox``: the reference file of a sandboxed child (the one file outside its folder
        it may read), None for the plain child."""
        self.key = sandbox
        self.layers = None                #: the sandbox's layers (a sandboxed child)
        ctx = mp.get_context("spawn")
        #: the task the child holds: sent once, not with every case (a task of 4,000 cases pickled
        #: per case made validate quadratic in the number of cases)
        self._task = None
        if sandbox is not None and os.name == "posix":
            from kernel_forge.model.reference_sandbox import SandboxedChild
            self.proc = SandboxedChild([sandbox])
            self.conn, child = self.proc.conn, None
        else:
            self.conn, child = ctx.Pipe()
            arg = None if sandbox is None else tempfile.mkdtemp(prefix="kforge-sandbox-")
            self._folder = arg                # removed when the child ends (Windows: the sandbox's folder)
            self.proc = ctx.Process(target=child_main, args=(child, arg), daemon=True, name="kforge-reference")
        try:
            start_child(self.proc)        # a Ctrl-C during the start comes after it (the child ignores it)
        except OSError as exc:            # no interpreter to start, no process left, no file descriptor
            self.close(kill=True)
            raise ReferenceError_(f"the reference process could not be started: {exc}") from None
        if child is not None:
            child.close()
        if not self.conn.poll(START_TIMEOUT_S):
            self.close(kill=True)
            raise ReferenceError_(f"the reference process did not start within {START_TIMEOUT_S:.0f} s")
        try:
            _ready, self.layers = self._recv()
        except (EOFError, OSError, ValueError, KeyError, TypeError):
            self.close(kill=True)
            raise ReferenceError_(f"the reference process ended while starting (exit code {self.proc.exitcode})") from None

    def _recv(self):
        """The child's next message: unpickled from a plain child; from a sandboxed one, JSON only
        (a pickle from code in the sandbox would run code here)."""
        if self.key is None:
            return self.conn.recv()
        from kernel_forge.model.reference_sandbox import MAX_MESSAGE, decode
        kind, body = decode(self.conn.recv_bytes(MAX_MESSAGE))
        return kind, [_Out(*o) for o in body] if kind == "ok" else body

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def run(self, task, case_name: str, seed: int, inputs, time_limit_s: float, what: str) -> dict[str, np.ndarray]:
        try:
            self.conn.send(("run", None if task is self._task else task, case_name, seed, inputs))
            self._task = task
        except (BrokenPipeError, OSError):
            self.close(kill=True)
            raise ReferenceError_(f"{what}: the reference process is gone (exit code {self.proc.exitcode})") from None
        if not self.conn.poll(time_limit_s):
            self.close(kill=True)
            raise ReferenceError_(f"{what} did not finish within {time_limit_s:g} s; it was stopped",
                                  hint="make it faster, or allow it longer with \"reference\": {..., "
                                       "\"time_limit_s\": SECONDS} in the manifest")
        idle = False          # whether the child is back waiting for the next request
        try:
            try:
                kind, body = self._recv()
                if self.key is not None and kind == "ok":
                    from kernel_forge.model.reference_sandbox import check_outputs
                    check_outputs(task, inputs, [(o.name, o.shape, o.dtype) for o in body], what)
            except (ValueError, TypeError) as exc:        # not JSON, or not kforge's messages
                raise ReferenceError_(f"{what}: the sandboxed reference process sent a message that is not kforge's "
                                      f"({type(exc).__name__}: {str(exc)[:200]}); it was stopped") from None
            if kind == "error":
                idle = True
                exc = _rebuild(*body)
                if self.layers and not exc.hint:
                    exc.hint = ("this reference was written by a model and ran in the sandbox: it may not write "
                                "files, start processes, reach the network or read your files")
                raise exc
            out = {}
            for o in body:
                arr = np.empty(o.shape, dtype=np.dtype(o.dtype))
                flat = arr.reshape(-1).view(np.uint8)
                for lo in range(0, flat.size, CHUNK):
                    if not self.conn.poll(time_limit_s):
                        raise EOFError
                    self.conn.recv_bytes_into(memoryview(flat)[lo:lo + CHUNK])
                out[o.name] = arr
            idle = True
            return out
        except (EOFError, OSError):
            self.proc.join(2)
            code = self.proc.exitcode
            self.close(kill=True)
            ended = (f"was killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
                     else f"exited with code {code}")
            raise ReferenceError_(f"{what}: the reference process {ended} instead of returning (os._exit, a crash "
                                  "or a killed process); a reference must return, writing its outputs in place") from None
        finally:
            if not idle:          # Ctrl-C or a failure mid-answer: its state is unknown
                self.close(kill=True)

    def close(self, kill: bool = False) -> None:
        stop_child(self.proc, self.conn, ("exit",), kill=kill)
        cleanup = getattr(self.proc, "cleanup", None)
        if cleanup is not None:
            cleanup()
        elif getattr(self, "_folder", None) and not self.proc.is_alive():
            import shutil
            shutil.rmtree(self._folder, ignore_errors=True)


def _rebuild(kind: str, message: str, hint, file, json_path):
    """The child's error as the parent raises it (a ManifestError's message already names its file and path)."""
    if kind in ("ManifestError", "InputError"):
        return InputError(message, hint=hint)
    return ReferenceError_(message, hint=hint)


_idle: list[ReferenceProcess] = []
_lock = threading.Lock()
_layers: dict[str, list] = {}          #: reference file -> the layers of its latest sandboxed child


def _take(key: str | None = None) -> ReferenceProcess:
    with _lock:
        for p in reversed(list(_idle)):
            if p.key == key:
                _idle.remove(p)
                if p.alive:
                    return p
    p = ReferenceProcess(key)
    if key is not None:
        _layers[key] = p.layers
    return p


def _give_back(p: ReferenceProcess) -> None:
    with _lock:
        if p.alive and len(_idle) < KEEP_IDLE:
            _idle.append(p)
            return
    p.close()


@atexit.register
def shutdown() -> None:
    """End every idle child (also called by tests)."""
    with _lock:
        procs, _idle[:] = list(_idle), []
    for p in procs:
        p.close()


def sandboxed(task) -> bool:
    """Whether ``task``'s reference runs in the sandbox: a Python reference a model wrote."""
    return getattr(task, "generated", None) is not None and task.reference.kind == "python"


def sandbox_layers(task):
    """The sandbox's layers (:class:`~kernel_forge.common.sandbox.Layer`) of the latest child that
    ran ``task``'s reference; None when it has not run sandboxed in this process."""
    return _layers.get(str(task.reference.path)) if sandboxed(task) else None


def run_reference(task, case_name: str, seed: int, inputs=None) -> dict[str, np.ndarray]:
    """The reference's outputs for one case draw, computed in a child process (``inputs``: the
    draw to use, else the child draws (case, seed) itself; a sandboxed one is sent the draw),
    within the manifest's time limit."""
    limit = getattr(task, "reference_time_limit_s", None) or DEFAULT_TIME_LIMIT_S
    what = f"reference {task.reference.describe()} on case {case_name!r}"
    key = str(task.reference.path) if sandboxed(task) else None
    if key is not None and inputs is None:
        from kernel_forge.model.inputs import generate
        inputs = generate(task, task.case(case_name), seed)
    p = _take(key)
    try:
        return p.run(task, case_name, seed, inputs, limit, what)
    finally:
        if p.alive:
            _give_back(p)


__all__ = ["run_reference", "sandbox_layers", "sandboxed", "shutdown", "DEFAULT_TIME_LIMIT_S"]


def run_python_reference(task: Task, inputs: CaseInputs) -> dict[str, np.ndarray]:
    """The task's Python reference on ``inputs``, run in the reference process within the
    manifest's time limit; output storage arrays (bf16 as float32 values)."""
    from kernel_forge.model.reference_process import run_reference

    return run_reference(task, inputs.case.name, inputs.seed, inputs)


def reference_outputs(task: Task, case, seed: int) -> dict[str, np.ndarray]:
    """The task's Python reference on the (case, seed) draw, drawn and run in the reference
    process (nothing but the outputs crosses the pipe)."""
    from kernel_forge.model.reference_process import run_reference

    return run_reference(task, case.name, seed)
