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
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import signal
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

def child_main(conn) -> None:
    """The child's loop: one request at a time until the parent closes the pipe or says exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # Ctrl-C is the parent's to handle
    from kernel_forge.model.inputs import generate
    from kernel_forge.model.references import compute_reference

    conn.send(("ready", None))
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
            conn.send(("error", (type(exc).__name__ if known else "other", message, getattr(exc, "hint", None),
                                 getattr(exc, "file", None), getattr(exc, "json_path", "$"))))
            continue
        arrays = {k: np.ascontiguousarray(v) for k, v in outputs.items()}
        conn.send(("ok", [_Out(k, a.shape, a.dtype.str) for k, a in arrays.items()]))
        for a in arrays.values():
            flat = a.reshape(-1).view(np.uint8)
            for lo in range(0, flat.size, CHUNK):
                conn.send_bytes(flat[lo:lo + CHUNK])


# ------------------------------------------------------------------------------ the parent

class ReferenceProcess:
    """One child running references (see the module docstring)."""

    def __init__(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        #: the task the child holds: sent once, not with every case (a task of 4,000 cases pickled
        #: per case made validate quadratic in the number of cases)
        self._task = None
        self.proc = ctx.Process(target=child_main, args=(child,), daemon=True, name="kforge-reference")
        start_child(self.proc)            # a Ctrl-C during the start comes after it (the child ignores it)
        child.close()
        if not self.conn.poll(START_TIMEOUT_S):
            self.close(kill=True)
            raise ReferenceError_(f"the reference process did not start within {START_TIMEOUT_S:.0f} s")
        try:
            self.conn.recv()
        except (EOFError, OSError):
            self.close(kill=True)
            raise ReferenceError_(f"the reference process ended while starting (exit code {self.proc.exitcode})") from None

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
            kind, body = self.conn.recv()
            if kind == "error":
                idle = True
                raise _rebuild(*body)
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


def _rebuild(kind: str, message: str, hint, file, json_path):
    """The child's error as the parent raises it (a ManifestError's message already names its file and path)."""
    if kind in ("ManifestError", "InputError"):
        return InputError(message, hint=hint)
    return ReferenceError_(message, hint=hint)


_idle: list[ReferenceProcess] = []
_lock = threading.Lock()


def _take() -> ReferenceProcess:
    with _lock:
        while _idle:
            p = _idle.pop()
            if p.alive:
                return p
    return ReferenceProcess()


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


def run_reference(task, case_name: str, seed: int, inputs=None) -> dict[str, np.ndarray]:
    """The reference's outputs for one case draw, computed in a child process (``inputs``: the
    draw to use, else the child draws (case, seed) itself), within the manifest's time limit."""
    limit = getattr(task, "reference_time_limit_s", None) or DEFAULT_TIME_LIMIT_S
    what = f"reference {task.reference.describe()} on case {case_name!r}"
    p = _take()
    try:
        return p.run(task, case_name, seed, inputs, limit, what)
    finally:
        if p.alive:
            _give_back(p)


__all__ = ["run_reference", "shutdown", "DEFAULT_TIME_LIMIT_S"]


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
